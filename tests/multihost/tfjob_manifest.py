#!/usr/bin/env python3
"""Reads a Kubeflow TFJob manifest of deploy/ and prints, as one JSON line, how
netns_cluster.sh runs its job as the training operator would: {"name", "namespace",
"program", "ps", "workers", "args"}. Checks what the operator and Troupe rely on first:
kind TFJob of kubeflow.org/v1; replica types Chief (1), PS, Worker only; every replica with
restartPolicy ExitCode and the same pod (container "tensorflow", port 2222 named
tfjob-port, one program of /opt/troupe/bin, the cluster secret as a file from a Secret).
Paths under /state (the job's volume) become paths under STATE_DIR.

Usage: tfjob_manifest.py MANIFEST STATE_DIR
Prints {"ok": false, "error": ...} and exits 1 when the manifest breaks a rule."""
import json
import sys

import yaml


def fail(why):
    print(json.dumps({"ok": False, "error": why}))
    sys.exit(1)


def main():
    manifest, state_dir = sys.argv[1], sys.argv[2]
    with open(manifest) as f:
        job = yaml.safe_load(f)
    if job.get("apiVersion") != "kubeflow.org/v1" or job.get("kind") != "TFJob":
        fail("not a kubeflow.org/v1 TFJob")
    specs = job["spec"]["tfReplicaSpecs"]
    if not set(specs) <= {"Chief", "PS", "Worker"} or "Worker" not in specs:
        fail(f"replica types {sorted(specs)}: Troupe runs Chief, PS and Worker")
    if ("PS" in specs) != ("Chief" in specs):
        fail("a PS job needs a Chief (and a Chief needs PS tasks)")
    if "Chief" in specs and specs["Chief"]["replicas"] != 1:
        fail("exactly one Chief")
    pods = []
    for kind, spec in specs.items():
        if spec.get("restartPolicy") != "ExitCode":
            fail(f"{kind}: restartPolicy must be ExitCode (Troupe's exit codes say what to retry)")
        pod = spec["template"]["spec"]
        pods.append(json.dumps(pod, sort_keys=True))
        containers = pod["containers"]
        if len(containers) != 1 or containers[0]["name"] != "tensorflow":
            fail(f"{kind}: one container, named tensorflow (the operator's default)")
        c = containers[0]
        if {"name": "tfjob-port", "containerPort": 2222} not in c.get("ports", []):
            fail(f"{kind}: port 2222 named tfjob-port (the port TF_CONFIG names)")
        env = {e["name"]: e.get("value") for e in c.get("env", [])}
        secret_file = env.get("TROUPE_CLUSTER_SECRET_FILE", "")
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mount = next((p for p in mounts if secret_file.startswith(p + "/")), None)
        if mount is None or "secret" not in volumes.get(mounts[mount], {}):
            fail(f"{kind}: TROUPE_CLUSTER_SECRET_FILE must be a file of a mounted Secret")
        command = c["command"]
        if len(command) != 1 or not command[0].startswith("/opt/troupe/bin/"):
            fail(f"{kind}: the command must be one program of /opt/troupe/bin")
    if len(set(pods)) != 1:
        fail("every replica must run the same pod: the task comes from TF_CONFIG")
    c = specs["Worker"]["template"]["spec"]["containers"][0]
    args = [a.replace("/state/", state_dir.rstrip("/") + "/", 1) if a.startswith("/state/") else a
            for a in c.get("args", [])]
    print(json.dumps({
        "ok": True,
        "name": job["metadata"]["name"],
        "namespace": job["metadata"].get("namespace", "default"),
        "program": c["command"][0].rsplit("/", 1)[1],
        "ps": specs.get("PS", {}).get("replicas", 0),
        "workers": specs["Worker"]["replicas"],
        "args": args,
    }))


if __name__ == "__main__":
    main()
