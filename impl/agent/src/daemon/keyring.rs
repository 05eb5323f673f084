//! The agent's keyring: one Ed25519 signing key, made at the first start and stored with the
//! state, whose public half `/.well-known/jwks.json` publishes as Nomad publishes its
//! keyring's (for verifying the workload identities it signs). quiesce signs no workload
//! identity yet: the key set is there so that clients that check an agent is up by its key
//! set — Nomad's own API test harness does — find a real, stable one.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// A key as stored: its ID, algorithm and secret (base64url), and when it was made (Unix
/// seconds). The state file holding it is the agent's own (mode 0600).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoredKey {
    pub key_id: String,
    pub algorithm: String,
    pub secret: String,
    pub create_time: i64,
}

/// The only algorithm the keyring makes or reads.
const ALGORITHM: &str = "EdDSA";

pub struct Keyring {
    keys: Vec<(String, SigningKey)>,
}

impl Keyring {
    /// The stored keys, or, if there are none, a new one (returned too, to be stored).
    pub fn restore_or_create(
        stored: Vec<StoredKey>,
        new_id: impl FnOnce() -> String,
        now_secs: i64,
    ) -> Result<(Keyring, Option<StoredKey>), String> {
        let mut keys = Vec::new();
        for key in &stored {
            if key.algorithm != ALGORITHM {
                return Err(format!(
                    "stored key {:?} has algorithm {:?}; this agent reads only {ALGORITHM}",
                    key.key_id, key.algorithm
                ));
            }
            let secret: [u8; 32] = URL_SAFE_NO_PAD
                .decode(&key.secret)
                .ok()
                .and_then(|bytes| bytes.try_into().ok())
                .ok_or_else(|| format!("stored key {:?} is not a 32-byte secret", key.key_id))?;
            keys.push((key.key_id.clone(), SigningKey::from_bytes(&secret)));
        }
        if !keys.is_empty() {
            return Ok((Keyring { keys }, None));
        }
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| format!("drawing a signing key: {e}"))?;
        let created = StoredKey {
            key_id: new_id(),
            algorithm: ALGORITHM.into(),
            secret: URL_SAFE_NO_PAD.encode(secret),
            create_time: now_secs,
        };
        keys.push((created.key_id.clone(), SigningKey::from_bytes(&secret)));
        Ok((Keyring { keys }, Some(created)))
    }

    /// The public keys as a JSON Web Key Set (RFC 7517; Ed25519 as RFC 8037's OKP keys).
    pub fn jwks(&self) -> Value {
        let keys: Vec<Value> = self
            .keys
            .iter()
            .map(|(id, key)| {
                json!({
                    "kty": "OKP", "crv": "Ed25519", "use": "sig", "alg": ALGORITHM, "kid": id,
                    "x": URL_SAFE_NO_PAD.encode(key.verifying_key().as_bytes()),
                })
            })
            .collect();
        json!({ "keys": keys })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_is_made_once_and_read_back_the_same() {
        let (made, stored) = Keyring::restore_or_create(Vec::new(), || "k1".into(), 7).unwrap();
        let stored = stored.expect("a new keyring stores its key");
        let (again, none) = Keyring::restore_or_create(vec![stored], || "k2".into(), 8).unwrap();
        assert!(none.is_none(), "a restored keyring makes no key");
        assert_eq!(made.jwks(), again.jwks());
        let key = &again.jwks()["keys"][0];
        assert_eq!(
            (key["kid"].as_str(), key["crv"].as_str()),
            (Some("k1"), Some("Ed25519"))
        );
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(key["x"].as_str().unwrap())
                .unwrap()
                .len(),
            32
        );
    }

    #[test]
    fn a_damaged_stored_key_is_refused_by_name() {
        let bad = StoredKey {
            key_id: "k1".into(),
            algorithm: ALGORITHM.into(),
            secret: "c2hvcnQ".into(),
            create_time: 0,
        };
        let error = Keyring::restore_or_create(vec![bad], || "k2".into(), 0)
            .err()
            .unwrap();
        assert!(
            error.contains("\"k1\"") && error.contains("32-byte"),
            "{error}"
        );
    }
}
