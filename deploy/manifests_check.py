"""Offline checks of deploy/k8s and the Helm chart (deploy/helm/kernelserve).

Parses every manifest, checks the fleet's wiring (each DaemonSet passes
--job_store and --node_id from variables it defines, the job store Secret's
keys, the PostgreSQL StatefulSet), renders the kustomization with
`kubectl kustomize` and the chart with `helm template` where those tools
exist, and otherwise checks that every value the chart's templates read is in
values.yaml. Exits 1 naming the first problem of each file.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

problems = []


def fail(what):
    problems.append(what)


def docs(path_or_text, name):
    try:
        text = open(path_or_text).read() if os.path.exists(path_or_text) else path_or_text
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        fail(f"{name}: not YAML: {e}")
        return []


def check_fleet_pod(doc, where, secret):
    """The kernelserve container takes the job store and node id from env it defines."""
    spec = doc["spec"]["template"]["spec"]
    c = spec["containers"][0]
    args = c.get("args", [])
    env = {e["name"]: e for e in c.get("env", [])}
    for flag, var in (("--job_store", "KS_JOB_STORE"), ("--node_id", "KS_NODE_NAME")):
        if f"{flag}=$({var})" not in args:
            fail(f"{where}: args lack {flag}=$({var}): {args}")
    # Kubernetes leaves $(NAME) of an undefined variable as it is: a typo
    # would reach the server as a literal URL.
    for a in args:
        for var in re.findall(r"\$\((\w+)\)", a):
            if var not in env:
                fail(f"{where}: arg {a} uses $({var}), which env does not define")
    for var, key in (("KS_JOB_STORE", "url"), ("PGPASSWORD", "password")):
        ref = env.get(var, {}).get("valueFrom", {}).get("secretKeyRef", {})
        if ref.get("key") != key or (secret and ref.get("name") != secret):
            fail(f"{where}: env {var} must come from Secret {secret or '<job store>'} key {key}, got {ref}")
    if env.get("KS_NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") != "spec.nodeName":
        fail(f"{where}: KS_NODE_NAME must be the node's name (fieldRef spec.nodeName)")


def check_kinds(all_docs, where, want):
    kinds = sorted(d.get("kind", "?") for d in all_docs)
    for kind, n in want.items():
        if kinds.count(kind) != n:
            fail(f"{where}: expected {n} {kind}, got kinds {kinds}")


def check_k8s(root):
    k8s = os.path.join(root, "deploy/k8s")
    parsed = {}
    for path in sorted(glob.glob(os.path.join(k8s, "*.yaml"))):
        parsed[os.path.basename(path)] = docs(path, path)
    kust = (parsed.get("kustomization.yaml") or [{}])[0]
    for r in kust.get("resources", []):
        if r not in parsed:
            fail(f"deploy/k8s/kustomization.yaml: resource {r} does not exist")
    listed = [d for r in kust.get("resources", []) for d in parsed.get(r, [])]
    check_kinds(listed, "deploy/k8s (kustomization)", {"DaemonSet": 2, "StatefulSet": 1})
    for d in listed:
        if d.get("kind") == "DaemonSet":
            check_fleet_pod(d, f"deploy/k8s DaemonSet {d['metadata']['name']}", "kernelserve-job-store")
    secret = (parsed.get("secret-job-store.example.yaml") or [{}])[0]
    if sorted(secret.get("stringData", {})) != ["password", "url"]:
        fail("deploy/k8s/secret-job-store.example.yaml: expected keys url and password")
    if not secret.get("stringData", {}).get("url", "").startswith("postgres://"):
        fail("deploy/k8s/secret-job-store.example.yaml: url must be a postgres:// URL")
    kubectl = shutil.which("kubectl")
    if kubectl:
        # kustomize does not follow the symlinks of a Bazel runfiles tree: a real copy.
        with tempfile.TemporaryDirectory() as tmp:
            copy = shutil.copytree(k8s, os.path.join(tmp, "k8s"))
            out = subprocess.run([kubectl, "kustomize", copy], capture_output=True, text=True)
        if out.returncode != 0:
            fail(f"kubectl kustomize deploy/k8s: {out.stderr.strip()}")
        else:
            check_kinds(docs(out.stdout, "kubectl kustomize output"), "kubectl kustomize deploy/k8s",
                        {"DaemonSet": 2, "StatefulSet": 1, "Namespace": 1})
            print("kubectl kustomize deploy/k8s: rendered")
    else:
        print("kubectl not installed: the kustomization is checked by parsing its files only")


def values_paths(v, prefix=""):
    out = set()
    if isinstance(v, dict):
        for k, x in v.items():
            p = f"{prefix}.{k}" if prefix else k
            out.add(p)
            out |= values_paths(x, p)
    return out


def check_chart(root):
    chart = os.path.join(root, "deploy/helm/kernelserve")
    meta = docs(os.path.join(chart, "Chart.yaml"), "Chart.yaml")
    values = docs(os.path.join(chart, "values.yaml"), "values.yaml")
    if not meta or meta[0].get("apiVersion") != "v2" or not meta[0].get("name"):
        fail("deploy/helm/kernelserve/Chart.yaml: expected apiVersion v2 and a name")
    if not values:
        return
    values = values[0]
    known = values_paths(values)
    vendor_keys = [set(v) for v in values.get("vendors", {}).values()]
    for path in sorted(glob.glob(os.path.join(chart, "templates/*"))):
        text = open(path).read()
        for ref in re.findall(r"\.Values\.([A-Za-z0-9_.]+)", text):
            if ref not in known:
                fail(f"{path}: reads .Values.{ref}, which values.yaml does not have")
        for ref in re.findall(r"\$v\.(\w+)", text):
            if any(ref not in k for k in vendor_keys):
                fail(f"{path}: reads $v.{ref}, which some vendors.* entry of values.yaml lacks")
    helm = shutil.which("helm")
    if not helm:
        print("helm not installed: the chart's templates are not rendered (values they read checked)")
        return
    lint = subprocess.run([helm, "lint", chart, "--set", "jobStore.password=x"], capture_output=True, text=True)
    if lint.returncode != 0:
        fail(f"helm lint: {lint.stdout.strip()} {lint.stderr.strip()}")
    out = subprocess.run([helm, "template", "ks", chart, "--set", "jobStore.password=x,vendors.amd.enabled=true"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        fail(f"helm template: {out.stderr.strip()}")
        return
    rendered = docs(out.stdout, "helm template output")
    check_kinds(rendered, "helm template", {"DaemonSet": 2, "StatefulSet": 1})
    for d in rendered:
        if d.get("kind") == "DaemonSet":
            check_fleet_pod(d, f"helm DaemonSet {d['metadata']['name']}", "ks-job-store")
    print("helm template: rendered")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    check_k8s(root)
    check_chart(root)
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print("deploy manifests: OK")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
