//! A `tandem render` input file: multi-document YAML of a world.
//! The checks are in `tandem::fuzzing`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tandem::fuzzing::render(data);
});
