#!/usr/bin/env bash
# make podman-config: let plain `podman run` work on hosts like the CI machines, where crun
# refuses the hybrid cgroups and podman's default rlimits are refused. Writes a drop-in
# (root: /etc/containers/containers.conf.d, else ~/.config/containers/containers.conf.d)
# choosing runc and explicit rlimits. The devcluster and scripts pass these flags anyway.
set -euo pipefail
if [ "$(id -u)" = 0 ]; then dir=/etc/containers/containers.conf.d
else dir="${XDG_CONFIG_HOME:-$HOME/.config}/containers/containers.conf.d"
fi
mkdir -p "$dir"
cat > "$dir/50-kyai.conf" <<'CONF'
# Written by kyai-operator's scripts/podman-config.sh.
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]

[engine]
runtime = "runc"
CONF
echo "podman-config: $dir/50-kyai.conf"
