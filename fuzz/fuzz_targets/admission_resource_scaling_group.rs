//! An AdmissionReview body sent to /mutate/resourcescalinggroups and
//! /validate/resourcescalinggroups. The checks are in `tandem::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tandem::fuzzing::admission(tandem::admission::Kind::ResourceScalingGroup, data);
});
