#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| quiesce_agent::fuzzing::jobspec_json(data));
