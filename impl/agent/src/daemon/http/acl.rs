//! ACLs over the API, as Nomad has them: the request's token (`X-Nomad-Token`, else
//! `Authorization: Bearer`) decides what it may do ([`authority`]); the routes check it
//! ([`Need`]); and the `/v1/acl/...` endpoints bootstrap, and manage tokens and policies.
//! With ACLs off every request may do anything and the ACL endpoints answer Nomad's
//! `ACL support disabled`.

use super::*;
use crate::acl::policy::{Access, Rules};
use crate::acl::{self, AclError, Authority, TokenRequest, TokenType};
use crate::daemon::persist::{AclRecord, Payload, Table};

/// Nomad's statuses and texts.
pub(super) fn acl_error(e: AclError) -> ApiError {
    match e {
        AclError::TokenNotFound => error(403, "ACL token not found"),
        AclError::PermissionDenied => error(403, "Permission denied"),
        AclError::Invalid(message) => error(400, message),
        AclError::NotFound(message) => error(404, message),
    }
}

/// What the request's token may do; an unknown token is refused here, before any route.
pub(super) fn authority(shared: &Shared, token: Option<&str>) -> Result<Authority, ApiError> {
    authority_at(shared, token).map(|(authority, _)| authority)
}

/// [`authority`], with the index of the last ACL write it was read at (under the same
/// lock): a shared answer built with this authority is kept under that index, never a later
/// one (`mod.rs`, `shared_answer`).
pub(super) fn authority_at(
    shared: &Shared,
    token: Option<&str>,
) -> Result<(Authority, u64), ApiError> {
    let core = shared.core();
    let at = core.acl.index();
    if !shared.config.acl_enabled {
        return Ok((Authority::Unchecked, at));
    }
    let authority = core.acl.authority(token).map_err(acl_error)?;
    Ok((authority, at))
}

/// What a route needs of the token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Nothing (the leader, the regions, the bootstrap).
    Nothing,
    /// Nothing to be let in: what is shown is filtered by the token (the namespaces and ACL
    /// policies it may see, the peers' regions).
    Filtered,
    /// Checked by the handler against the record asked for: the token's own, or any for a
    /// management token (an ACL token or policy); the topics asked for (the event stream).
    Own,
    /// A capability in the request's namespace.
    Capability(&'static str),
    /// Either of two capabilities (a parse: `parse-job` or `submit-job`, as Nomad).
    Either(&'static str, &'static str),
    /// `agent` read.
    AgentRead,
    /// `node` read (the nodes; the agent's members, as Nomad).
    NodeRead,
    /// `node` read and a capability (a node's allocations).
    NodeReadAnd(&'static str),
    /// `agent` write (a join).
    AgentWrite,
    /// A management token (Nomad's rule for what it cannot filter by namespace).
    Management,
}

/// `Ok` if the token may, else Nomad's 403. Every object quiesce holds is in `default`
/// (a job in another namespace is refused at registration), so every check is against
/// `default`, whatever the query's `namespace` says: rights in another namespace grant
/// nothing here.
pub(super) fn check(authority: &Authority, need: Need) -> Result<(), ApiError> {
    let namespace = "default";
    let allowed = match need {
        Need::Nothing | Need::Filtered | Need::Own => true,
        Need::Capability(cap) => authority.allows(namespace, cap),
        Need::Either(a, b) => authority.allows(namespace, a) || authority.allows(namespace, b),
        Need::AgentRead => authority.allows_agent(false),
        Need::NodeRead => authority.allows_node(false),
        Need::NodeReadAnd(cap) => authority.allows_node(false) && authority.allows(namespace, cap),
        Need::AgentWrite => authority.allows_agent(true),
        Need::Management => authority.is_management(),
    };
    authority.require(allowed).map_err(acl_error)
}

/// The ACL endpoints answer only where ACLs are on (Nomad's 400 otherwise).
pub(super) fn acl_enabled(shared: &Shared) -> Result<(), ApiError> {
    if shared.config.acl_enabled {
        Ok(())
    } else {
        Err(error(400, "ACL support disabled"))
    }
}

/// `GET /v1/acl/tokens` (a management token's, checked by the route).
pub(super) fn list_tokens(shared: &Shared) -> Result<Reply, ApiError> {
    let core = shared.core();
    let tokens: Vec<Value> = core.acl.tokens().map(|t| token_json(t, false)).collect();
    ok(json!(tokens), core.server.store.index())
}

/// `GET /v1/acl/token/self`: the request's own token.
pub(super) fn token_self(authority: &Authority) -> Result<Reply, ApiError> {
    let token = authority
        .token()
        .ok_or_else(|| acl_error(AclError::TokenNotFound))?;
    ok(token_json(token, true), token.modify_index)
}

/// `GET /v1/acl/policies`: those of the request's token (every one for a management token,
/// the anonymous policy without a token).
pub(super) fn list_policies(shared: &Shared, authority: &Authority) -> Result<Reply, ApiError> {
    let core = shared.core();
    let mine = |name: &str| match authority.token() {
        _ if authority.is_management() => true,
        Some(token) => token.policies.iter().any(|p| p == name),
        None => name == acl::ANONYMOUS_POLICY,
    };
    let policies: Vec<Value> = core
        .acl
        .policies()
        .filter(|p| mine(&p.name))
        .map(|p| {
            json!({"Name": p.name, "Description": p.description,
                   "CreateIndex": p.create_index, "ModifyIndex": p.modify_index})
        })
        .collect();
    ok(json!(policies), core.server.store.index())
}

/// `GET /v1/acl/token/:accessor`: the request's own token, or any for a management token.
pub(super) fn get_token(
    shared: &Shared,
    authority: &Authority,
    accessor: &str,
) -> Result<Reply, ApiError> {
    let own = authority.token().is_some_and(|t| t.accessor_id == accessor);
    authority
        .require(own || authority.is_management())
        .map_err(acl_error)?;
    let core = shared.core();
    let token = core
        .acl
        .token(accessor)
        .ok_or_else(|| error(404, "ACL token not found"))?;
    ok(token_json(token, true), token.modify_index)
}

/// `DELETE /v1/acl/token/:accessor` (a management token's).
pub(super) fn delete_token(shared: &Shared, accessor: &str) -> Result<Reply, ApiError> {
    acl_write(shared, |store, _, _| {
        let token = store.delete_token(accessor)?;
        Ok((Value::Null, vec![deleted(AclRecord::Token(token))]))
    })
}

/// `GET /v1/acl/policy/:name`: one of the request's token's policies, or any for a
/// management token.
pub(super) fn get_policy(
    shared: &Shared,
    authority: &Authority,
    name: &str,
) -> Result<Reply, ApiError> {
    let has = authority
        .token()
        .is_some_and(|t| t.policies.iter().any(|p| p == name));
    authority
        .require(has || authority.is_management())
        .map_err(acl_error)?;
    let core = shared.core();
    let (policy, rules) = core
        .acl
        .policy_rules(name)
        .ok_or_else(|| error(404, "ACL policy not found"))?;
    ok(
        json!({"Name": policy.name, "Description": policy.description,
               "Rules": policy.rules, "RulesJSON": rules_json(rules), "JobACL": null,
               "CreateIndex": policy.create_index,
               "ModifyIndex": policy.modify_index}),
        policy.modify_index,
    )
}

/// A policy's rules as read, in Nomad's `RulesJSON` shape (`acl.Policy`): each namespace
/// rule with its capabilities expanded, and the access of `agent`, `node` and `operator`.
/// The web UI reads it to show only the actions a token may take.
fn rules_json(rules: &Rules) -> Value {
    let access = |access: Access| match access {
        Access::None => Value::Null,
        Access::Read => json!({"Policy": "read"}),
        Access::Write => json!({"Policy": "write"}),
        Access::Deny => json!({"Policy": "deny"}),
    };
    let namespaces: Vec<Value> = rules
        .namespaces
        .iter()
        .map(|(name, caps)| json!({"Name": name, "Policy": "", "Capabilities": caps}))
        .collect();
    json!({"Namespaces": namespaces, "Agent": access(rules.agent),
           "Node": access(rules.node), "Operator": access(rules.operator)})
}

/// `DELETE /v1/acl/policy/:name` (a management token's).
pub(super) fn delete_policy(shared: &Shared, name: &str) -> Result<Reply, ApiError> {
    acl_write(shared, |store, _, _| {
        let policy = store.delete_policy(name)?;
        Ok((Value::Null, vec![deleted(AclRecord::Policy(policy))]))
    })
}

/// An ACL write: `change` edits the store at a new index (and the time now) and says what
/// to answer and which records to store; they are stored durably before the answer. A
/// refused change changes nothing, not even the index.
fn acl_write(
    shared: &Shared,
    change: impl FnOnce(
        &mut acl::AclStore,
        u64,
        i64,
    ) -> Result<(Value, Vec<crate::daemon::persist::Write>), AclError>,
) -> Result<Reply, ApiError> {
    let mut core = shared.core();
    let index = core.server.store.index() + 1;
    let (answer, writes) =
        change(&mut core.acl, index, crate::daemon::unix_now_ns()).map_err(acl_error)?;
    core.acl.wrote(index);
    assert_eq!(
        core.server
            .store
            .next_index(quiesce_core::server::events::WriteType::Acl),
        index
    );
    let stored = core.commit_durably_with(writes);
    shared.notify(&mut core);
    // No table of the store moved, yet every blocking query looks at its token again: one
    // deleted ends its queries with a 403 now, not at their next write.
    shared.watchers.wake_all();
    if let Err(e) = stored {
        // The write is kept and stored once it can be: a token made by it (the bootstrap's
        // above all, which cannot be made again) is of use only if its secret is known.
        let token = match (answer.get("AccessorID"), answer.get("SecretID")) {
            (Some(accessor), Some(secret)) => {
                format!("; the token is kept: AccessorID {accessor}, SecretID {secret}")
            }
            _ => String::new(),
        };
        return Err(error(500, format!("storing the write: {e}{token}")));
    }
    ok(answer, index)
}

fn store_record(record: AclRecord) -> crate::daemon::persist::Write {
    (Table::Acl, record.key(), Some(Payload::Acl(record)))
}

/// The deletion of a record, by its key.
fn deleted(record: AclRecord) -> crate::daemon::persist::Write {
    (Table::Acl, record.key(), None)
}

/// A fresh UUID for an accessor or a secret.
fn fresh() -> String {
    acl::random_uuid().expect("the kernel's random source is readable")
}

/// The body's object, or `{}` for an empty body.
fn body_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Map::new());
    }
    match serde_json::from_slice(body) {
        Ok(Value::Object(object)) => Ok(object),
        Ok(_) => Err(error(400, "the request body must be a JSON object")),
        Err(e) => Err(error(400, format!("invalid JSON: {e}"))),
    }
}

/// A field of `object` as Go decodes it: the key case-insensitively.
fn field<'a>(object: &'a Map<String, Value>, name: &str) -> Option<&'a Value> {
    object
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v)
        .filter(|v| !v.is_null())
}

fn string_field(object: &Map<String, Value>, name: &str) -> Result<String, ApiError> {
    match field(object, name) {
        None => Ok(String::new()),
        Some(Value::String(text)) => Ok(text.clone()),
        Some(_) => Err(error(400, format!("{name} must be a string"))),
    }
}

pub(super) fn bootstrap(shared: &Shared, body: &[u8]) -> Result<Reply, ApiError> {
    let object = body_object(body)?;
    let secret = Some(string_field(&object, "BootstrapSecret")?).filter(|s| !s.is_empty());
    acl_write(shared, |store, index, now| {
        let token = store.bootstrap(secret, fresh, index, now)?;
        Ok((
            token_json(&token, true),
            vec![
                store_record(AclRecord::Token(token)),
                store_record(AclRecord::Bootstrap(index)),
            ],
        ))
    })
}

pub(super) fn upsert_token(
    shared: &Shared,
    accessor: Option<&str>,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let object = body_object(body)?;
    if object.is_empty() {
        return Err(error(400, "Request body is empty"));
    }
    let kind = match string_field(&object, "Type")?.as_str() {
        "" => None,
        "client" => Some(TokenType::Client),
        "management" => Some(TokenType::Management),
        other => {
            return Err(error(
                400,
                format!("token type must be client or management, not {other:?}"),
            ))
        }
    };
    let policies = match field(&object, "Policies") {
        None => Vec::new(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|p| p.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| error(400, "Policies must be a list of names"))?,
        Some(_) => return Err(error(400, "Policies must be a list of names")),
    };
    let given = string_field(&object, "AccessorID")?;
    if let (Some(path), false) = (accessor, given.is_empty()) {
        if path != given {
            return Err(error(400, "AccessorID does not match the request path"));
        }
    }
    let request = TokenRequest {
        accessor_id: accessor.map(str::to_string),
        name: string_field(&object, "Name")?,
        kind,
        policies,
        global: field(&object, "Global")
            .and_then(Value::as_bool)
            .unwrap_or(false),
    };
    acl_write(shared, |store, index, now| {
        let token = store.upsert_token(request, fresh, index, now)?;
        Ok((
            token_json(&token, true),
            vec![store_record(AclRecord::Token(token))],
        ))
    })
}

pub(super) fn upsert_policy(shared: &Shared, name: &str, body: &[u8]) -> Result<Reply, ApiError> {
    let object = body_object(body)?;
    if object.is_empty() {
        return Err(error(400, "Request body is empty"));
    }
    let given = string_field(&object, "Name")?;
    if !given.is_empty() && given != name {
        return Err(error(400, "Policy name does not match request path"));
    }
    let description = string_field(&object, "Description")?;
    let text = string_field(&object, "Rules")?;
    // Parsed before the core's lock is taken: an HCL input that holds the parser for
    // minutes (hcl-rs has some, see fuzz/regressions/) holds this request only.
    let rules = acl::policy::parse(&text).map_err(|e| acl_error(AclError::Invalid(e)))?;
    acl_write(shared, |store, index, _| {
        let policy = store.upsert_parsed_policy(name, description, text, rules, index)?;
        Ok((Value::Null, vec![store_record(AclRecord::Policy(policy))]))
    })
}

/// A token as Nomad renders it (`ACLToken`; a list's stub has no secret).
fn token_json(token: &acl::Token, with_secret: bool) -> Value {
    let mut value = json!({
        "AccessorID": token.accessor_id,
        "Name": token.name,
        "Type": token.kind,
        "Policies": token.policies,
        "Roles": null,
        "Global": token.global,
        "Hash": "",
        "CreateTime": quiesce_core::gotime::rfc3339(token.create_time),
        "ExpirationTime": null,
        "CreateIndex": token.create_index,
        "ModifyIndex": token.modify_index,
    });
    if with_secret {
        value["SecretID"] = json!(token.secret_id);
    }
    value
}
