//! The `acl` commands: `acl bootstrap [FILE]`, `acl policy apply [-description D] NAME
//! FILE`, `acl token create [-name N] [-type client|management] [-policy P]… [-global]`,
//! printing what Nomad's CLI prints.

use super::api::{fields, text};
use super::{AclCommand, AclPolicyCommand, AclTokenCommand};
use serde_json::{json, Value};
use std::io::Read;

pub(super) fn acl(command: AclCommand) -> Result<(), String> {
    match command {
        AclCommand::Bootstrap { file, address } => {
            let api = address.api()?;
            let body = match file {
                None => json!({}),
                Some(file) => {
                    let secret = read(&file)?;
                    json!({"BootstrapSecret": secret.trim()})
                }
            };
            let token = api.call("POST", "/v1/acl/bootstrap", Some(&encode(&body)))?;
            println!("{}", token_fields(&token));
        }
        AclCommand::Policy(AclPolicyCommand::Apply {
            description,
            name,
            file,
            address,
        }) => {
            let api = address.api()?;
            let rules = read(&file)?;
            let body = json!({"Name": name, "Description": description.unwrap_or_default(),
                              "Rules": rules});
            let path = format!("/v1/acl/policy/{}", super::api::segment(&name));
            api.call("POST", &path, Some(&encode(&body)))?;
            println!("Successfully wrote {name:?} ACL policy!");
        }
        AclCommand::Token(AclTokenCommand::Create {
            name,
            kind,
            policies,
            global,
            address,
        }) => {
            let api = address.api()?;
            let body = json!({"Name": name.unwrap_or_default(), "Type": kind,
                              "Policies": policies, "Global": global});
            let token = api.call("POST", "/v1/acl/token", Some(&encode(&body)))?;
            println!("{}", token_fields(&token));
        }
    }
    Ok(())
}

fn encode(body: &Value) -> Vec<u8> {
    serde_json::to_vec(body).expect("JSON values serialize")
}

/// A file's text, or stdin's for `-`.
fn read(file: &std::path::Path) -> Result<String, String> {
    if file.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| format!("reading stdin: {e}"))?;
        return Ok(text);
    }
    std::fs::read_to_string(file).map_err(|e| format!("reading {}: {e}", file.display()))
}

/// A token as Nomad's `acl token` commands print it.
fn token_fields(token: &Value) -> String {
    let list = |key: &str| match token[key].as_array() {
        Some(items) if !items.is_empty() => {
            let names: Vec<String> = items
                .iter()
                .map(|p| p.as_str().unwrap_or("").into())
                .collect();
            format!("[{}]", names.join(" "))
        }
        _ => "n/a".to_string(),
    };
    fields(&[
        ("Accessor ID", text(token, "AccessorID")),
        ("Secret ID", text(token, "SecretID")),
        ("Name", text(token, "Name")),
        ("Type", text(token, "Type")),
        ("Global", text(token, "Global")),
        ("Create Time", text(token, "CreateTime")),
        ("Expiry Time", "<none>".into()),
        ("Create Index", text(token, "CreateIndex")),
        ("Modify Index", text(token, "ModifyIndex")),
        ("Policies", list("Policies")),
        ("Roles", "<none>".into()),
    ])
}
