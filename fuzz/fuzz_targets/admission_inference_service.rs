//! An AdmissionReview body sent to /mutate/inferenceservices and
//! /validate/inferenceservices. The checks are in `tandem::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tandem::fuzzing::admission(tandem::admission::Kind::InferenceService, data);
});
