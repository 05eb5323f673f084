//! What the fuzz targets run (`fuzz/fuzz_targets/`), and the tests that replay their saved
//! corpora (`impl/agent/tests/fuzz_corpus.rs`): each takes any bytes as an attacker would send
//! them, must not panic, and checks what must hold of what it accepts.

use quiesce_core::spec::{self, JobRegisterRequest};

/// A register body: decoded, defaulted and validated, or refused with errors that each
/// name a field. What is accepted is valid, canonical, and reads back as itself.
pub fn jobspec_json(data: &[u8]) {
    match spec::parse_register_body(data) {
        Ok(job) => {
            assert!(job.validate().is_ok(), "an accepted job validates");
            let mut again = job.clone();
            again.canonicalize();
            assert_eq!(again, job, "an accepted job is canonical");
            let body = serde_json::to_vec(&JobRegisterRequest { job: job.clone() })
                .expect("a job serializes");
            let back = spec::parse_register_body(&body).expect("an accepted job reads back");
            assert_eq!(back, job, "an accepted job reads back as itself");
        }
        Err(errors) => {
            assert!(!errors.0.is_empty(), "a refusal says why");
            assert!(errors
                .0
                .iter()
                .all(|e| !e.field.is_empty() && !e.problem.is_empty()));
        }
    }
}

/// An HCL jobspec (`job run FILE.hcl`, `/v1/jobs/parse`): mapped to the API's shape or
/// refused; what it maps to goes through [`jobspec_json`].
pub fn hcl_jobspec(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = quiesce_core::hcl_jobspec::parse_job(text);
    if let Err(error) = &parsed {
        assert!(!error.message.is_empty(), "a refusal says why");
        if let Some(place) = error.place {
            assert!(place.start.line >= 1 && place.start.column >= 1);
            assert!(place.start.line <= text.lines().count().max(1) + 1);
        }
    }
    if let Ok(job) = parsed {
        let body = serde_json::to_vec(&serde_json::json!({ "Job": job })).expect("JSON");
        jobspec_json(&body);
    }
}

/// A request's first lines: `METHOD URL`, then its `Host` and `Origin` values, each on a
/// line of its own; see [`crate::daemon::http::fuzz_request`].
pub fn request(data: &[u8]) {
    crate::daemon::http::fuzz_request(data);
}
