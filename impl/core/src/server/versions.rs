//! Writes that register a version made from one already stored: `job revert` (an older
//! version's spec again, Nomad's `Job.Revert`) and `job scale` (the latest with one group's
//! count changed, Nomad's `Job.Scale`). Each goes through the registration, so a revert
//! rolls out as any update does, through the stop path and its delays.

use super::{RegisterOptions, Server, ServerError, WriteResponse};
use crate::spec::Job;

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

    /// `job scale JOB GROUP COUNT`: the latest version with `group`'s count changed,
    /// registered (no allocation is replaced for a count alone). Refused while a deployment
    /// is active, as Nomad refuses it.
    pub fn scale_job(
        &mut self,
        job_id: &str,
        group: &str,
        count: i64,
    ) -> Result<WriteResponse, ServerError> {
        let mut job = self
            .store
            .job(job_id)
            .cloned()
            .ok_or_else(|| ServerError::NotFound(format!("job {job_id:?} not found")))?;
        if count < 0 {
            return Err(ServerError::Refused(
                "scaling action count can't be negative".into(),
            ));
        }
        let Some(target) = job.task_groups.iter_mut().find(|g| g.name == group) else {
            return Err(ServerError::Refused(format!(
                "task group {group:?} specified for scaling does not exist in job"
            )));
        };
        if self
            .store
            .latest_deployment(job_id)
            .is_some_and(|d| d.is_active())
        {
            return Err(ServerError::Refused(
                "job scaling blocked due to active deployment".into(),
            ));
        }
        target.count = Some(count);
        // The submitted source no longer says what is stored: `spec_only` drops it.
        let job = Job {
            stop: job.stop,
            ..job.spec_only()
        };
        self.register_job_with(job, RegisterOptions::default())
    }
}
