"""Prints, as one line of JSON, the agent's registrations of each service named in
$QUIESCE_SERVICES (space-separated), read from $QUIESCE_AGENT: {name: [registration, ...]}."""
import json
import os
import urllib.request

agent = os.environ["QUIESCE_AGENT"]
seen = {}
for name in os.environ.get("QUIESCE_SERVICES", "").split():
    with urllib.request.urlopen(f"{agent}/v1/service/{name}", timeout=5) as answer:
        seen[name] = json.load(answer)
print(json.dumps(seen, separators=(",", ":")))
