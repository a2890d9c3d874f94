//! An AdmissionReview body sent to /mutate/scaleviews and /validate/scaleviews:
//! a ScaleView, or the autoscaling/v1 Scale of a write to scaleviews/scale.
//! The checks are in `tandem::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tandem::fuzzing::admission(tandem::admission::Kind::ScaleView, data);
});
