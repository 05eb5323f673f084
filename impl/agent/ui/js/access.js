// What the operator's token may do, read from the API (`/v1/acl/token/self` and each of its
// policies' `RulesJSON`), so that the page offers only the actions the token may take. The
// API checks every request again: a hidden button is a courtesy, not the guard.

import { get, seg, token } from "./api.js";

let access = { enabled: false, token: null, capabilities: new Set(), management: false };

/** The capabilities of one policy in `namespace`: its exact rule, else the longest glob. */
function namespaceCapabilities(rules, namespace) {
  const namespaces = (rules && rules.Namespaces) || [];
  const exact = namespaces.find((n) => n.Name === namespace);
  if (exact) return exact.Capabilities || [];
  const glob = (pattern) => new RegExp(
    `^${pattern.split("*").map((p) => p.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join(".*")}$`,
  );
  const matching = namespaces
    .filter((n) => n.Name.includes("*") && glob(n.Name).test(namespace))
    .sort((a, b) => b.Name.length - a.Name.length || (a.Name < b.Name ? -1 : 1));
  return matching.length ? matching[0].Capabilities || [] : [];
}

/** Reads the token's rights again (after sign-in or sign-out). */
export async function loadAccess() {
  try {
    const { data } = await get("/v1/acl/token/self");
    const capabilities = new Set();
    let deny = false;
    for (const name of data.Policies || []) {
      try {
        const policy = (await get(`/v1/acl/policy/${seg(name)}`)).data;
        for (const cap of namespaceCapabilities(policy.RulesJSON, "default")) {
          if (cap === "deny") deny = true;
          capabilities.add(cap);
        }
      } catch (error) {
        // A policy deleted since the token was made grants nothing.
      }
    }
    access = {
      enabled: true,
      token: data,
      management: data.Type === "management",
      capabilities: deny ? new Set() : capabilities,
    };
  } catch (error) {
    const disabled = error.status === 400 && /ACL support disabled/i.test(error.message);
    access = { enabled: !disabled, token: null, capabilities: new Set(), management: false, error };
  }
  return access;
}

export function current() {
  return access;
}

/** Whether the token may use `capability` in the default namespace. */
export function can(capability) {
  if (!access.enabled || access.management) return true;
  return access.capabilities.has(capability);
}

/** ACLs are on and no token was given: the page asks for one first. */
export function needsToken() {
  return access.enabled && !token();
}
