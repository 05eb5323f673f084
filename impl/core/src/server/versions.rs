//! A write that registers a version made from one already stored: `job revert` (an older
//! version's spec again, Nomad's `Job.Revert`). It goes through the registration, so a
//! revert rolls out as any update does, through the stop path and its delays. (`job
//! scale`, the latest with one group's count changed, is in `scaling.rs`, with the events
//! it records.)

use super::{RegisterOptions, Server, ServerError, WriteResponse};

impl Server {
    /// `job revert JOB VERSION`: version `version`'s spec (and `Stop`) registered again as a
    /// new version. `enforce_prior`: only if the current version is that one.
    pub fn revert_job(
        &mut self,
        job_id: &str,
        version: u64,
        enforce_prior: Option<u64>,
    ) -> Result<WriteResponse, ServerError> {
        let current = self
            .store
            .job(job_id)
            .cloned()
            .ok_or_else(|| ServerError::NotFound(format!("job {job_id:?} not found")))?;
        if current.version == version {
            return Err(ServerError::Refused(
                "can't revert to current version".into(),
            ));
        }
        if let Some(prior) = enforce_prior.filter(|&prior| prior != current.version) {
            return Err(ServerError::Refused(format!(
                "Current job has version {}; enforcing version {prior}",
                current.version
            )));
        }
        let old = self
            .store
            .job_versions(job_id)
            .and_then(|versions| versions.iter().find(|v| v.version == version))
            .cloned()
            .ok_or_else(|| {
                ServerError::NotFound(format!(
                    "job {job_id:?} in namespace {:?} at version {version} not found",
                    current.namespace
                ))
            })?;
        self.register_job_with(old.resubmitted(), RegisterOptions::default())
    }
}
