#!/usr/bin/env bash
# The ROCm image variant (deploy/Containerfile.rocm, FROM scratch with Debian
# 12's HIP runtime and ROCm SMI bundled by make_bundle.sh --rocm), built
# offline and run on this machine, which has no AMD GPU:
#   - every bundled ROCm library resolves inside the image (its own loader);
#   - `kernelserve --backend=hip` loads the image's libamdhip64.so.5 and
#     refuses to start with "no HIP device", exit status 1;
#   - `--backend=auto` tries HIP (the same runtime, named in its log), falls
#     back to cpu and serves a bf16 attention call from kernelctl, whose
#     error against the fp64 oracle it reports; SIGTERM exits 0.
#
# Skips (exit 0, with a message) when podman is missing or unusable, or when
# Debian's libamdhip64-5 / librocm-smi64-1 are not installed here (.ci/setup
# installs both). Run directly or via
#   bazel test //tests:container_rocm_test
set -uo pipefail
# ldconfig lives in /usr/sbin on Debian, which a test's PATH (bazel test) lacks.
PATH="$PATH:/usr/sbin:/sbin"
source "$(dirname "${BASH_SOURCE[0]}")/container_lib.sh" || exit 1

require_podman
command -v python3 >/dev/null 2>&1 || skip "python3 is needed to write the call's .npy inputs"
# The cache read once: grep -q on a pipe from ldconfig would stop reading at
# the first match and, under pipefail, fail on ldconfig's SIGPIPE.
ld_cache=$(ldconfig -p)
for so in libamdhip64.so.5 libamd_comgr.so.2 librocm_smi64.so.1; do
  grep -q "^[[:space:]]*$so " <<<"$ld_cache" ||
    skip "$so is not installed (apt-get install libamdhip64-5 librocm-smi64-1): nothing to bundle"
done

find_binaries server/kernelserve client/kernelctl server/security/token_tool
require_usable_podman
start_scratch ks-rocm
# Image: the Containerfile's default base (scratch), nothing pulled.
build_image Containerfile.rocm --rocm

# The ROCm libraries resolve inside the image.
for so in libamdhip64.so.5 libamd_comgr.so.2 librocm_smi64.so.1; do
  deps=$(podman run --rm --entrypoint /lib64/ld-linux-x86-64.so.2 "$tag" --list "/opt/kernelserve/lib/$so" 2>&1) ||
    fail "$so does not load in the image: $deps"
  grep -q "not found" <<<"$deps" && fail "$so in the image lacks libraries: $(echo "$deps" | grep 'not found')"
done

# --backend=hip: the image's HIP runtime answers that there is no device.
out=$(timeout 120 podman run --rm "$tag" --backend=hip --listen=127.0.0.1:50051 2>&1)
rc=$?
[ $rc = 1 ] || fail "--backend=hip without an AMD GPU: exit status $rc, want 1: $out"
grep -qF -- "cannot start: UNAVAILABLE: --backend=hip: no HIP device: hipGetDeviceCount: hipErrorNoDevice (libamdhip64.so.5, HIP runtime " <<<"$out" ||
  fail "--backend=hip: want the image's runtime to report no HIP device, got: $out"

# --backend=auto: cpu, serving kernelctl on a loopback-published port.
podman run -d --name "$name" --read-only --cap-drop=ALL --security-opt=no-new-privileges \
  -p 127.0.0.1::50051 "$tag" --backend=auto --listen=0.0.0.0:50051 --insecure \
  --data_dir=/tmp/ks-data >/dev/null || fail "podman run --backend=auto"
published_port port 50051
ctl=("$kernelctl" --server="127.0.0.1:$port" --timeout=30)
wait_serving "${ctl[@]}"
logs=$(podman logs "$name" 2>&1)
grep -q "backend auto: using cpu (.*hip: no HIP device: hipGetDeviceCount: hipErrorNoDevice (libamdhip64.so.5" <<<"$logs" ||
  fail "auto did not try the image's HIP runtime before cpu: $(echo "$logs" | grep 'backend auto')"
devices=$("${ctl[@]}" devices) || fail "kernelctl devices: $devices"
grep -q cpu <<<"$devices" || fail "no cpu device: $devices"

# .npy files by hand (format 1.0: magic, header dict padded to 64 bytes, data).
python3 - "$work" <<'PY' || fail "writing the inputs"
import random, struct, sys
random.seed(7)
shape = (1, 2, 32, 64)
n = 1 * 2 * 32 * 64
header = "{'descr': '<f4', 'fortran_order': False, 'shape': %r, }" % (shape,)
header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
for name in "qkv":
    with open(f"{sys.argv[1]}/{name}.npy", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack(f"<{n}f", *(random.gauss(0, 1) for _ in range(n))))
PY
out=$("${ctl[@]}" attention --q="$work/q.npy" --k="$work/k.npy" --v="$work/v.npy" --out="$work/o.npy" \
  --causal --report-error 2>&1) || fail "kernelctl attention: $out"
python3 - "$work/o.npy" <<'PY' || fail "attention output: $out"
import math, struct, sys
raw = open(sys.argv[1], "rb").read()
assert raw[:6] == b"\x93NUMPY", "not an .npy file"
hlen = struct.unpack("<H", raw[8:10])[0]
header = raw[10:10 + hlen].decode()
assert "'<f4'" in header and "(1, 2, 32, 64)" in header, header
data = struct.unpack("<%df" % (len(raw[10 + hlen:]) // 4), raw[10 + hlen:])
assert len(data) == 1 * 2 * 32 * 64, len(data)
assert all(math.isfinite(x) for x in data) and max(abs(x) for x in data) > 0, "non-finite or zero output"
PY
grep -q "^error_report: " <<<"$out" || fail "no error against the oracle reported: $out"

stop_expect_exit_0
echo "PASS: $tag ($(podman image inspect --format '{{.Size}}' "$tag") bytes): --backend=hip refused with the" \
  "image's libamdhip64.so.5, --backend=auto served attention on cpu (127.0.0.1:$port), stopped with exit 0"
