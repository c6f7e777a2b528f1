#!/usr/bin/env bash
# The project's own tests, from a fresh machine: the system tools the tests drive (installed when this
# runs as root with apt-get or dnf; otherwise named), a virtual environment when not already in one,
# the package with its test extra, then the tests. Extra arguments go to pytest (e.g. ./test.sh -n 2).
# PYTHON picks the interpreter (default python3), GPUACCEPT_TEST_VENV the environment (default .venv-test):
# .ci/run runs it on Python 3.11 and 3.13 with one environment each.
set -euo pipefail
cd "$(dirname "$0")"

tools=(iperf3 ethtool ip ssh-keygen chromium pdftotext slurmctld slurmd srun munged mpirun sshd tc)
missing=()
for tool in "${tools[@]}"; do command -v "$tool" >/dev/null || missing+=("$tool"); done
# A font with the Chinese glyphs: the zh-CN report printed to PDF (WenQuanYi Micro Hei, 1.6 MB, ~5 s to install)
[[ -n $(fc-list :lang=zh family 2>/dev/null) ]] || missing+=("a CJK font (fonts-wqy-microhei)")
python=${PYTHON:-python3}
# A minimal Debian (a container, a debootstrap) has no Python at all: then it is one more thing to install.
command -v "$python" >/dev/null || missing+=("$python")
in_venv=$("$python" -c 'import sys; print(int(sys.prefix != sys.base_prefix))' 2>/dev/null || echo 0)
has_venv=$("$python" -c 'import ensurepip, venv' 2>/dev/null && echo 1 || echo 0)

if [[ ${#missing[@]} -gt 0 || ( $in_venv == 0 && $has_venv == 0 ) ]]; then
    if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        # iperf3, ethtool, ip: the network tests run the real tools in a namespace; ssh-keygen signs bundles;
        # chromium prints the report to PDF and screenshots it, as a signer's browser would, and poppler's pdftotext
        # reads the PDF back; Slurm, munge, Open MPI (PMIx) and sshd make the real cluster the cluster tests run
        # in network namespaces.
        apt-get install -y -qq --no-install-recommends iperf3 ethtool iproute2 openssh-client python3 python3-venv \
            chromium poppler-utils fonts-wqy-microhei slurm-wlm slurmctld slurmd slurm-client munge openmpi-bin libpmix2 libpmix-dev openssh-server >/dev/null
    elif [[ $(id -u) == 0 ]] && command -v dnf >/dev/null; then
        dnf install -y -q iperf3 ethtool iproute openssh-clients openssh-server python3 poppler-utils wqy-microhei-fonts slurm slurm-slurmctld \
            slurm-slurmd munge openmpi >/dev/null
    else
        echo "test.sh: missing ${missing[*]:-python3-venv}; run as root (apt-get or dnf) or install them:" \
             "the tests that drive them fail closed without them" >&2
    fi
fi

if [[ $in_venv == 0 ]]; then
    venv=${GPUACCEPT_TEST_VENV:-.venv-test}
    "$python" -m venv "$venv"
    # shellcheck disable=SC1091
    . "$venv/bin/activate"
    python=python
fi
"$python" -m pip install -q --upgrade pip
"$python" -m pip install -q '.[test]'
# PyTorch's CPU build for the training test that runs the shipped load for real (cluster.utilisation, gloo): only where
# its wheel for this interpreter is already on disk (pip's find-links: Python 3.11 here, 17-38 s to install), never a
# download (elsewhere pip would fetch a CUDA build of several GB); without it that test is a skip that says why.
if "$python" -m pip install -q --no-index --no-deps --dry-run torch==2.13.0 >/dev/null 2>&1; then
    "$python" -m pip install -q torch==2.13.0
fi
# Spread over the machine's cores (pytest-xdist, in the test extra), two workers a core: much of the suite's time is
# fake tools taking the time the real ones take (an ib_write_bw -D 5 waits 5 s), a worker asleep beside one that
# computes (on 2 cores: 356 s with 4 workers, 440-510 s with 2). GPUACCEPT_TEST_WORKERS=0 runs them in this process.
workers=$(( 2 * $(nproc 2>/dev/null || echo 1) ))
# --dist loadgroup: the tests marked xdist_group("fabric") (network namespaces moving real bytes) run one at a time,
# on one worker; every other test is spread as before.
"$python" -m pytest tests -n "${GPUACCEPT_TEST_WORKERS:-$workers}" --dist loadgroup "$@"
