//! Access control as Nomad has it: tokens (a management token may do anything; a client
//! token what its policies grant), policies of HCL rules ([`policy`]), a one-time bootstrap
//! that makes the first management token, and what a request's token may do
//! ([`Authority`]). The records and their rules ([`AclStore`]) do no I/O: a write takes its
//! new IDs, index and time from its caller; the daemon stores the records and checks every
//! request (`daemon/http/acl.rs`). The one exception is [`random_uuid`], which reads
//! `/dev/urandom`: the daemon's source of accessor IDs and secrets. A request without a
//! token is the anonymous one: it may do what the policy named `anonymous` grants, if there
//! is one, and nothing else.
//!
//! A request's token (`X-Nomad-Token`, else `Authorization: Bearer`) is resolved once,
//! after the browser guard and before routing; an unknown token is a 403 `ACL token not
//! found` on every route. Tokens, policies and the bootstrap's index are redb records,
//! written durably at a new index before the answer and restored at start; a stored policy
//! that no longer parses stops the start, naming it. Secrets are [`random_uuid`]'s v4 UUIDs
//! (the seeded `IdGen` makes reproducible IDs, not secrets). A blocking query resolves its
//! token again at every look, so a deleted token ends its waits. Limits: [`MAX_TOKENS`],
//! [`MAX_POLICIES`], 64 policies per token, 64 KiB of rules.

pub mod policy;

use policy::{Access, Rules};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The policy that requests without a token are granted (Nomad's anonymous token's).
pub const ANONYMOUS_POLICY: &str = "anonymous";

/// Tokens and policies the agent holds at most: each is checked on requests.
pub const MAX_TOKENS: usize = 10_000;
pub const MAX_POLICIES: usize = 1_000;
/// Policies per token.
pub const MAX_TOKEN_POLICIES: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenType {
    Client,
    Management,
}

/// A token, as stored (the API renders its times).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Token {
    pub accessor_id: String,
    pub secret_id: String,
    pub name: String,
    pub kind: TokenType,
    pub policies: Vec<String>,
    pub global: bool,
    /// Unix ns.
    pub create_time: i64,
    pub create_index: u64,
    pub modify_index: u64,
}

/// A policy, as stored: its rules' text (checked when it was applied) and their reading.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Policy {
    pub name: String,
    pub description: String,
    pub rules: String,
    pub create_index: u64,
    pub modify_index: u64,
}

/// Why a request may not go on; each is Nomad's status and text.
#[derive(Debug, PartialEq, Eq)]
pub enum AclError {
    /// A token was given that the agent does not hold (403 `ACL token not found`).
    TokenNotFound,
    /// The token may not do this (403 `Permission denied`).
    PermissionDenied,
    /// The request itself is wrong (400, the text says what).
    Invalid(String),
    /// No such token or policy (404).
    NotFound(&'static str),
}

/// What a request may do, from its token (a copy: it outlives the lock it was read under).
#[derive(Debug)]
pub enum Authority {
    /// ACLs are off: anything.
    Unchecked,
    Management(Token),
    /// A client token (`Some`) or the anonymous request (`None`), and the rules of its
    /// policies that exist.
    Client(Option<Token>, Vec<Rules>),
}

impl Authority {
    /// Whether the token may use `capability` in `namespace`: some policy grants it and
    /// none denies the namespace.
    pub fn allows(&self, namespace: &str, capability: &str) -> bool {
        match self {
            Authority::Unchecked | Authority::Management(_) => true,
            Authority::Client(_, rules) => {
                let found: Vec<_> = rules
                    .iter()
                    .filter_map(|r| r.in_namespace(namespace))
                    .collect();
                !found.iter().any(|caps| caps.contains("deny"))
                    && found.iter().any(|caps| caps.contains(capability))
            }
        }
    }

    /// Whether the token may read (or write) the agent's own endpoints.
    pub fn allows_agent(&self, write: bool) -> bool {
        match self {
            Authority::Unchecked | Authority::Management(_) => true,
            Authority::Client(_, rules) => rules
                .iter()
                .map(|r| r.agent)
                .fold(Access::None, Access::max)
                .allows(write),
        }
    }

    /// Whether the token may read (or write) the nodes.
    pub fn allows_node(&self, write: bool) -> bool {
        match self {
            Authority::Unchecked | Authority::Management(_) => true,
            Authority::Client(_, rules) => rules
                .iter()
                .map(|r| r.node)
                .fold(Access::None, Access::max)
                .allows(write),
        }
    }

    pub fn is_management(&self) -> bool {
        matches!(self, Authority::Unchecked | Authority::Management(_))
    }

    /// The request's token, if it gave one the agent holds.
    pub fn token(&self) -> Option<&Token> {
        match self {
            Authority::Unchecked => None,
            Authority::Management(token) => Some(token),
            Authority::Client(token, _) => token.as_ref(),
        }
    }

    /// `Ok` if `allowed`, else Nomad's 403.
    pub fn require(&self, allowed: bool) -> Result<(), AclError> {
        if allowed {
            Ok(())
        } else {
            Err(AclError::PermissionDenied)
        }
    }
}

/// What a token create or update asks for (the API's `ACLToken` body, in part).
#[derive(Debug, Default)]
pub struct TokenRequest {
    /// Set for an update: the token to change.
    pub accessor_id: Option<String>,
    pub name: String,
    pub kind: Option<TokenType>,
    pub policies: Vec<String>,
    pub global: bool,
}

/// Every token and policy, and whether the bootstrap has been done.
#[derive(Debug, Default)]
pub struct AclStore {
    tokens: BTreeMap<String, Token>,
    by_secret: BTreeMap<String, String>,
    policies: BTreeMap<String, (Policy, Rules)>,
    /// The index of the bootstrap, once it is done.
    bootstrapped: Option<u64>,
    /// The index of the last write since the agent started (0 before one): the shared
    /// answers are keyed on it (`daemon/http/answers.rs`).
    written: u64,
}

impl AclStore {
    /// The index of the last write since the agent started.
    pub fn index(&self) -> u64 {
        self.written
    }

    /// Notes a write made at `index` (each change takes an index of its own).
    pub fn wrote(&mut self, index: u64) {
        debug_assert!(index > self.written, "ACL writes come in index order");
        self.written = index;
    }

    /// The store as loaded; a stored policy whose rules no longer read is an error naming
    /// it (never silently a policy that grants nothing, or everything).
    pub fn restore(
        tokens: Vec<Token>,
        policies: Vec<Policy>,
        bootstrapped: Option<u64>,
    ) -> Result<AclStore, String> {
        let mut store = AclStore {
            bootstrapped,
            ..AclStore::default()
        };
        for token in tokens {
            store.insert_token(token);
        }
        for stored in policies {
            let rules = policy::parse(&stored.rules)
                .map_err(|e| format!("the stored ACL policy {:?}: {e}", stored.name))?;
            store.policies.insert(stored.name.clone(), (stored, rules));
        }
        Ok(store)
    }

    fn insert_token(&mut self, token: Token) {
        self.by_secret
            .insert(token.secret_id.clone(), token.accessor_id.clone());
        self.tokens.insert(token.accessor_id.clone(), token);
    }

    pub fn bootstrapped(&self) -> Option<u64> {
        self.bootstrapped
    }

    /// What a request with `secret` (or none) may do.
    pub fn authority(&self, secret: Option<&str>) -> Result<Authority, AclError> {
        let token = match secret.filter(|s| !s.is_empty()) {
            None => None,
            Some(secret) => Some(
                self.by_secret
                    .get(secret)
                    .and_then(|accessor| self.tokens.get(accessor))
                    .ok_or(AclError::TokenNotFound)?,
            ),
        };
        if let Some(token) = token.filter(|t| t.kind == TokenType::Management) {
            return Ok(Authority::Management(token.clone()));
        }
        let names: Vec<&str> = match token {
            Some(token) => token.policies.iter().map(String::as_str).collect(),
            None => vec![ANONYMOUS_POLICY],
        };
        let rules = names
            .iter()
            .filter_map(|name| self.policies.get(*name).map(|(_, rules)| rules.clone()))
            .collect();
        Ok(Authority::Client(token.cloned(), rules))
    }

    /// The bootstrap: the first management token, once. `secret` is the operator's own
    /// (a UUID), else `fresh` is.
    pub fn bootstrap(
        &mut self,
        secret: Option<String>,
        fresh: impl FnMut() -> String,
        index: u64,
        now: i64,
    ) -> Result<Token, AclError> {
        if let Some(done) = self.bootstrapped {
            return Err(AclError::Invalid(format!(
                "ACL bootstrap already done (reset index: {done})"
            )));
        }
        if let Some(secret) = &secret {
            if !is_uuid(secret) {
                return Err(AclError::Invalid(
                    "invalid acl token: BootstrapSecret must be a UUID".into(),
                ));
            }
        }
        let mut fresh = fresh;
        let token = Token {
            accessor_id: fresh(),
            secret_id: secret.unwrap_or_else(&mut fresh),
            name: "Bootstrap Token".into(),
            kind: TokenType::Management,
            policies: Vec::new(),
            global: true,
            create_time: now,
            create_index: index,
            modify_index: index,
        };
        self.bootstrapped = Some(index);
        self.insert_token(token.clone());
        Ok(token)
    }

    /// Creates a token (no accessor given) or updates one (its name, policies; never its
    /// type, secret or locality).
    pub fn upsert_token(
        &mut self,
        request: TokenRequest,
        mut fresh: impl FnMut() -> String,
        index: u64,
        now: i64,
    ) -> Result<Token, AclError> {
        if request.name.len() > 256 || request.name.chars().any(char::is_control) {
            return Err(AclError::Invalid(
                "token name must be at most 256 bytes, without control characters".into(),
            ));
        }
        if request.policies.len() > MAX_TOKEN_POLICIES {
            return Err(AclError::Invalid(format!(
                "a token has at most {MAX_TOKEN_POLICIES} policies"
            )));
        }
        let token = match request.accessor_id {
            Some(accessor) => {
                let old = self
                    .tokens
                    .get(&accessor)
                    .ok_or(AclError::NotFound("ACL token not found"))?;
                if request.kind.is_some_and(|kind| kind != old.kind) {
                    return Err(AclError::Invalid("cannot change token type".into()));
                }
                if request.global != old.global {
                    return Err(AclError::Invalid(
                        "cannot toggle global mode of a token".into(),
                    ));
                }
                Token {
                    name: request.name,
                    policies: request.policies,
                    modify_index: index,
                    ..old.clone()
                }
            }
            None => {
                if self.tokens.len() >= MAX_TOKENS {
                    return Err(AclError::Invalid(format!(
                        "the agent holds at most {MAX_TOKENS} tokens"
                    )));
                }
                Token {
                    accessor_id: fresh(),
                    secret_id: fresh(),
                    name: request.name,
                    kind: request.kind.unwrap_or(TokenType::Client),
                    policies: request.policies,
                    global: request.global,
                    create_time: now,
                    create_index: index,
                    modify_index: index,
                }
            }
        };
        match token.kind {
            TokenType::Client if token.policies.is_empty() => {
                return Err(AclError::Invalid("client token missing policies".into()))
            }
            TokenType::Management if !token.policies.is_empty() => {
                return Err(AclError::Invalid(
                    "management token cannot be associated with policies".into(),
                ))
            }
            _ => {}
        }
        self.insert_token(token.clone());
        Ok(token)
    }

    pub fn delete_token(&mut self, accessor: &str) -> Result<Token, AclError> {
        let token = self
            .tokens
            .remove(accessor)
            .ok_or(AclError::NotFound("ACL token not found"))?;
        self.by_secret.remove(&token.secret_id);
        Ok(token)
    }

    pub fn token(&self, accessor: &str) -> Option<&Token> {
        self.tokens.get(accessor)
    }

    pub fn tokens(&self) -> impl Iterator<Item = &Token> {
        self.tokens.values()
    }

    /// Creates or replaces a policy; its rules are checked first, and nothing changes if
    /// they are wrong.
    pub fn upsert_policy(
        &mut self,
        name: &str,
        description: String,
        rules_text: String,
        index: u64,
    ) -> Result<Policy, AclError> {
        let rules = policy::parse(&rules_text).map_err(AclError::Invalid)?;
        self.upsert_parsed_policy(name, description, rules_text, rules, index)
    }

    /// [`AclStore::upsert_policy`] with its rules parsed already: the daemon parses them
    /// before it takes the lock this store is under (HCL parsing has slow inputs).
    pub fn upsert_parsed_policy(
        &mut self,
        name: &str,
        description: String,
        rules_text: String,
        rules: Rules,
        index: u64,
    ) -> Result<Policy, AclError> {
        if !valid_policy_name(name) {
            return Err(AclError::Invalid(format!(
                "invalid name {name:?}: a policy's name is 1 to 128 letters, digits and '-'"
            )));
        }
        if description.len() > 256 {
            return Err(AclError::Invalid(
                "a policy's description is at most 256 bytes".into(),
            ));
        }
        let create_index = match self.policies.get(name) {
            Some((old, _)) => old.create_index,
            None if self.policies.len() >= MAX_POLICIES => {
                return Err(AclError::Invalid(format!(
                    "the agent holds at most {MAX_POLICIES} policies"
                )))
            }
            None => index,
        };
        let stored = Policy {
            name: name.to_string(),
            description,
            rules: rules_text,
            create_index,
            modify_index: index,
        };
        self.policies
            .insert(name.to_string(), (stored.clone(), rules));
        Ok(stored)
    }

    pub fn delete_policy(&mut self, name: &str) -> Result<Policy, AclError> {
        self.policies
            .remove(name)
            .map(|(policy, _)| policy)
            .ok_or(AclError::NotFound("ACL policy not found"))
    }

    pub fn policy(&self, name: &str) -> Option<&Policy> {
        self.policies.get(name).map(|(policy, _)| policy)
    }

    /// A policy with its rules as read (Nomad's `RulesJSON`).
    pub fn policy_rules(&self, name: &str) -> Option<(&Policy, &Rules)> {
        self.policies
            .get(name)
            .map(|(policy, rules)| (policy, rules))
    }

    pub fn policies(&self) -> impl Iterator<Item = &Policy> {
        self.policies.values().map(|(policy, _)| policy)
    }
}

/// Nomad's rule for a policy's name: 1 to 128 letters, digits and `-`.
fn valid_policy_name(name: &str) -> bool {
    (1..=128).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, hex.
pub fn is_uuid(text: &str) -> bool {
    text.len() == 36
        && text.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_hexdigit(),
        })
}

/// A random version-4 UUID from the kernel's CSPRNG: secrets must not be guessable (the
/// seeded [`quiesce_core::ids::IdGen`] makes reproducible IDs, not secrets).
pub fn random_uuid() -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    bytes[6] = (bytes[6] & 0x0F) | 0x40;
    bytes[8] = (bytes[8] & 0x3F) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids() -> impl FnMut() -> String {
        let mut n = 0;
        move || {
            n += 1;
            format!("00000000-0000-4000-8000-{n:012}")
        }
    }

    #[test]
    fn the_bootstrap_is_done_once() {
        let mut store = AclStore::default();
        let token = store.bootstrap(None, ids(), 5, 0).unwrap();
        assert_eq!(token.kind, TokenType::Management);
        assert_eq!(
            store.bootstrap(None, ids(), 6, 0),
            Err(AclError::Invalid(
                "ACL bootstrap already done (reset index: 5)".into()
            ))
        );
        assert!(store
            .authority(Some(&token.secret_id))
            .unwrap()
            .is_management());
    }

    #[test]
    fn a_client_token_may_do_what_its_policies_grant_and_a_deny_wins() {
        let mut store = AclStore::default();
        store
            .upsert_policy(
                "readonly",
                String::new(),
                r#"namespace "*" { policy = "read" }"#.into(),
                1,
            )
            .unwrap();
        store
            .upsert_policy(
                "stopper",
                String::new(),
                r#"namespace "default" { capabilities = ["alloc-lifecycle"] }"#.into(),
                2,
            )
            .unwrap();
        store
            .upsert_policy(
                "nothing-here",
                String::new(),
                r#"namespace "prod" { policy = "deny" }"#.into(),
                3,
            )
            .unwrap();
        let token = store
            .upsert_token(
                TokenRequest {
                    name: "ops".into(),
                    policies: vec!["readonly".into(), "stopper".into(), "nothing-here".into()],
                    ..TokenRequest::default()
                },
                ids(),
                4,
                0,
            )
            .unwrap();
        let authority = store.authority(Some(&token.secret_id)).unwrap();
        assert!(authority.allows("default", "read-job"));
        assert!(authority.allows("default", "alloc-lifecycle"));
        assert!(!authority.allows("default", "submit-job"));
        assert!(!authority.allows("prod", "read-job"), "the deny wins");
        assert!(!authority.allows_agent(false));
        assert!(!authority.is_management());
        assert_eq!(
            store.authority(Some("unknown")).unwrap_err(),
            AclError::TokenNotFound
        );
    }

    #[test]
    fn anonymous_requests_get_the_anonymous_policy_only() {
        let mut store = AclStore::default();
        assert!(!store
            .authority(None)
            .unwrap()
            .allows("default", "list-jobs"));
        store
            .upsert_policy(
                ANONYMOUS_POLICY,
                String::new(),
                r#"namespace "default" { policy = "read" }"#.into(),
                1,
            )
            .unwrap();
        let anonymous = store.authority(None).unwrap();
        assert!(anonymous.allows("default", "list-jobs"));
        assert!(!anonymous.allows("default", "submit-job"));
    }

    #[test]
    fn bad_tokens_and_policies_change_nothing() {
        let mut store = AclStore::default();
        let client = TokenRequest {
            name: "x".into(),
            ..TokenRequest::default()
        };
        assert!(matches!(
            store.upsert_token(client, ids(), 1, 0),
            Err(AclError::Invalid(e)) if e == "client token missing policies"
        ));
        assert!(matches!(
            store.upsert_policy("a b", String::new(), "agent { policy = \"read\" }".into(), 1),
            Err(AclError::Invalid(e)) if e.contains("\"a b\"")
        ));
        store
            .upsert_policy("p", String::new(), r#"agent { policy = "read" }"#.into(), 1)
            .unwrap();
        assert!(store
            .upsert_policy("p", String::new(), r#"agent { policy = "root" }"#.into(), 2)
            .is_err());
        assert_eq!(store.policy("p").unwrap().modify_index, 1);
        assert_eq!(store.tokens().count(), 0);
    }

    #[test]
    fn random_uuids_are_uuids_and_differ() {
        let (a, b) = (random_uuid().unwrap(), random_uuid().unwrap());
        assert!(is_uuid(&a) && is_uuid(&b) && a != b, "{a} {b}");
        assert_eq!(a.as_bytes()[14], b'4');
    }
}
