//! `job scale` and the scaling events it records (Nomad's `Job.Scale`,
//! `nomad/job_endpoint.go`, and `structs.ScalingEvent`, read for facts).
//!
//! Every accepted scale request records one event for its group, whether it changes the
//! count or not. A request with a `Count` registers the latest version with that group's
//! count changed (no allocation is replaced for a count alone) and its evaluation, then
//! records the event, which names that evaluation, in a write of its own (as Nomad's
//! event is a raft entry after the registration's). A request without one — an
//! autoscaler's report, `Error: true` or a bare `Message` — changes no job: only the event
//! is written.
//!
//! The store keeps [`JOB_TRACKED_SCALING_EVENTS`] events per group, newest first, and
//! deletes a job's events with the job (`store/scaling.rs`). Each event's `Message` and
//! `Meta` are bounded ([`MAX_SCALING_MESSAGE_BYTES`], [`MAX_SCALING_META_BYTES`]), so a
//! job's events are bounded by its groups.

use super::events::WriteType;
use super::structs::JobId;
use super::{RegisterOptions, Server, ServerError};
use crate::spec::Job;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Nomad's `structs.JobTrackedScalingEvents`: the events kept per task group.
pub const JOB_TRACKED_SCALING_EVENTS: usize = 20;

/// The longest `Message` an event keeps, in bytes (Nomad has no bound; an autoscaler's
/// messages are a sentence).
pub const MAX_SCALING_MESSAGE_BYTES: usize = 4 * 1024;

/// The largest `Meta` an event keeps, in bytes of its JSON (Nomad has no bound).
pub const MAX_SCALING_META_BYTES: usize = 16 * 1024;

/// One scaling event, in Nomad's JSON shape (`structs.ScalingEvent`; the API's
/// `api.ScalingEvent` reads the same keys).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ScalingEvent {
    /// When the request was recorded, Unix nanoseconds (0 in the simulator, which has no
    /// clock).
    #[serde(rename = "Time")]
    pub time_ns: i64,
    /// The group's new count; `None` for a request that changed none.
    pub count: Option<i64>,
    /// The group's count when the request came.
    pub previous_count: i64,
    pub message: String,
    pub error: bool,
    pub meta: Option<Map<String, Value>>,
    /// The evaluation the registration of the new count made, if it made one.
    #[serde(rename = "EvalID")]
    pub eval_id: Option<String>,
    /// The index of the write that recorded the event.
    pub create_index: u64,
}

/// One job's scaling events (Nomad's `structs.JobScalingEvents`): by task group, each
/// group's newest first, at most [`JOB_TRACKED_SCALING_EVENTS`] of them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct JobScalingEvents {
    #[serde(rename = "JobID")]
    pub job_id: JobId,
    pub scaling_events: BTreeMap<String, Vec<ScalingEvent>>,
    /// The index of the last event recorded.
    pub modify_index: u64,
}

/// `PUT /v1/job/:id/scale`'s request (Nomad's `api.ScalingRequest`), once decoded.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ScaleRequest {
    /// The task group (`Target.Group`).
    pub group: String,
    /// The new count; `None` records an event and changes nothing.
    pub count: Option<i64>,
    pub message: String,
    pub error: bool,
    pub meta: Option<Map<String, Value>>,
    /// When not 0, the count is changed only if the job's `JobModifyIndex` is this.
    pub job_modify_index: u64,
}

/// What `job scale` answers (the fields of Nomad's `JobRegisterResponse` it sets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScaleResponse {
    /// The registration's evaluation; empty when the count was not changed.
    pub eval_id: String,
    /// The registration's index; 0 when the count was not changed.
    pub eval_create_index: u64,
    /// The job's `JobModifyIndex` after a registration, else its `ModifyIndex` (Nomad's).
    pub job_modify_index: u64,
    /// The index of the event's write.
    pub index: u64,
}

impl ScaleRequest {
    /// Nomad's `JobScaleRequest.Validate`, in its words, and the bounds of what an event
    /// keeps, naming the field.
    pub fn validate(&self) -> Result<(), ServerError> {
        let refused = |why: String| Err(ServerError::Refused(why));
        if self.group.is_empty() {
            return refused("missing task group name for scaling action".into());
        }
        if let Some(count) = self.count {
            if count < 0 {
                return refused("scaling action count can't be negative".into());
            }
            if self.error {
                return refused("scaling action should not contain count if error is true".into());
            }
        }
        if self.message.len() > MAX_SCALING_MESSAGE_BYTES {
            return refused(format!(
                "Message is {} bytes; a scaling event keeps at most {MAX_SCALING_MESSAGE_BYTES}",
                self.message.len()
            ));
        }
        let meta_bytes = self
            .meta
            .as_ref()
            .map_or(0, |meta| Value::Object(meta.clone()).to_string().len());
        if meta_bytes > MAX_SCALING_META_BYTES {
            return refused(format!(
                "Meta is {meta_bytes} bytes of JSON; a scaling event keeps at most \
                 {MAX_SCALING_META_BYTES}"
            ));
        }
        Ok(())
    }
}

impl Server {
    /// `job scale`: with a count, the latest version with `group`'s count changed,
    /// registered; then, with a count or without, the request recorded as the group's
    /// newest scaling event. Refused as Nomad refuses it: a request that fails
    /// [`ScaleRequest::validate`], an unknown job (not found) or group, a system job's count
    /// above 1, a count change while a deployment is active, or a `JobModifyIndex` that is
    /// no longer the job's. A refused request records nothing.
    pub fn scale_job(
        &mut self,
        job_id: &str,
        request: ScaleRequest,
    ) -> Result<ScaleResponse, ServerError> {
        request.validate()?;
        let job = self
            .store
            .job(job_id)
            .cloned()
            .ok_or_else(|| ServerError::NotFound(format!("job {job_id:?} not found")))?;
        if job.job_type == "system" && request.count.is_some_and(|count| count > 1) {
            return Err(ServerError::Refused(
                "jobs of type \"system\" can only be scaled between 0 and 1".into(),
            ));
        }
        let Some(group) = job.task_groups.iter().find(|g| g.name == request.group) else {
            return Err(ServerError::Refused(format!(
                "task group {:?} specified for scaling does not exist in job",
                request.group
            )));
        };
        let previous_count = group.count.unwrap_or(1);
        let (eval_id, eval_create_index, job_modify_index) = match request.count {
            Some(count) => {
                let registered = self.register_count(job, &request.group, count, &request)?;
                let job_modify_index = self
                    .store
                    .job(job_id)
                    .map_or(0, |stored| stored.job_modify_index);
                (registered.eval_id, registered.index, job_modify_index)
            }
            None => (String::new(), 0, job.modify_index),
        };
        let index = self.store.next_index(WriteType::ScalingEvent);
        let event = ScalingEvent {
            time_ns: self.store.now(),
            count: request.count,
            previous_count,
            message: request.message,
            error: request.error,
            meta: request.meta,
            eval_id: (!eval_id.is_empty()).then(|| eval_id.clone()),
            create_index: index,
        };
        self.store.put_scaling_event(job_id, &request.group, event);
        Ok(ScaleResponse {
            eval_id,
            eval_create_index,
            job_modify_index,
            index,
        })
    }

    /// The registration of `job` with `group`'s count set to `count`.
    fn register_count(
        &mut self,
        mut job: Job,
        group: &str,
        count: i64,
        request: &ScaleRequest,
    ) -> Result<super::WriteResponse, ServerError> {
        if self
            .store
            .latest_deployment(&job.id)
            .is_some_and(|d| d.is_active())
        {
            return Err(ServerError::Refused(
                "job scaling blocked due to active deployment".into(),
            ));
        }
        if request.job_modify_index > 0 && request.job_modify_index != job.job_modify_index {
            return Err(ServerError::EnforceIndex(
                request.job_modify_index,
                format!(
                    "job exists with conflicting job modify index: {}",
                    job.job_modify_index
                ),
            ));
        }
        let target = job
            .task_groups
            .iter_mut()
            .find(|g| g.name == group)
            .expect("scale_job found the group");
        target.count = Some(count);
        // The submitted source no longer says what is stored: `spec_only` drops it.
        let job = Job {
            stop: job.stop,
            ..job.spec_only()
        };
        self.register_job_with(job, RegisterOptions::default())
    }
}

#[cfg(test)]
mod tests;
