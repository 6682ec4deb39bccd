#!/bin/sh
# The package test (make test-package): the .deb that make package built is checked (its contents,
# lintian with no errors, the desktop entry and AppStream file), installed on this machine with
# apt, its binaries run from where they were installed (each --version, a short train-local), its
# systemd units verified, and then purged: every file it installed must be gone.
# Usage: tests/installer/test-package.sh BUILD_DIR
set -eu
build=$1
src=$(cd "$(dirname "$0")/../.." && pwd)
version=$(sed -n 's/^ *VERSION \([0-9.]*\).*/\1/p' "$src/CMakeLists.txt" | head -1)
deb="$build/tessera_${version}_amd64.deb"
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "test-package: FAILED: $*" >&2; exit 1; }

[ -f "$deb" ] || fail "no $deb (make package)"
echo "test-package: checking $deb"

# Contents.
dpkg-deb -c "$deb" | awk '{ print $6 }' | sed 's|^\./|/|' > "$scratch/contents"
for path in /usr/bin/tessera /usr/bin/tessera-node /usr/bin/tessera-broker /usr/bin/tessera-job \
    /usr/libexec/tessera/tessera-device-probe /usr/libexec/tessera/tessera-compute /usr/share/applications/tessera.desktop \
    /usr/share/metainfo/io.tessera.Tessera.metainfo.xml /usr/share/icons/hicolor/scalable/apps/tessera.svg \
    /usr/share/icons/hicolor/48x48/apps/tessera.png /usr/share/icons/hicolor/256x256/apps/tessera.png \
    /usr/share/tessera/tessera.desktop /usr/share/man/man1/tessera-node.1.gz /usr/share/man/man1/tessera.1.gz \
    /usr/share/man/man1/tessera-broker.1.gz /usr/share/man/man1/tessera-job.1.gz /etc/tessera/node.ini \
    /etc/tessera/broker.ini /lib/systemd/system/tessera-broker.service /lib/systemd/system/tessera-node.service \
    /usr/share/doc/tessera/copyright /usr/share/doc/tessera/changelog.gz; do
    grep -qx "$path" "$scratch/contents" || fail "$path is not in the package"
done
echo "test-package: $(grep -vc '/$' "$scratch/contents") files, every expected one present"
dpkg-deb -f "$deb" Depends | grep -q libopenblas0-openmp || fail "Depends lacks libopenblas0-openmp"
dpkg-deb -f "$deb" Recommends | grep -q dataset-fashion-mnist || fail "Recommends lacks dataset-fashion-mnist"
echo "test-package: Depends: $(dpkg-deb -f "$deb" Depends)"

# lintian: no errors (warnings are printed for the record).
lintian --fail-on error --no-tag-display-limit "$deb" > "$scratch/lintian" 2>&1 || { cat "$scratch/lintian"; fail "lintian found errors"; }
echo "test-package: lintian: $(grep -c '^E:' "$scratch/lintian" || true) errors, $(grep -c '^W:' "$scratch/lintian" || true) warnings"
desktop-file-validate "$src/resources/tessera.desktop" || fail "the desktop entry does not validate"
appstreamcli validate --no-net --pedantic "$build/installer/io.tessera.Tessera.metainfo.xml" > "$scratch/appstream" 2>&1 \
    || { cat "$scratch/appstream"; fail "the AppStream file does not validate"; }

# Install, run, verify.
if dpkg-query -W -f='${Status}' tessera 2>/dev/null | grep -q 'install ok installed'; then
    $sudo apt-get purge -y -q tessera >/dev/null
fi
$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$(realpath "$deb")" > "$scratch/install" 2>&1 \
    || { cat "$scratch/install"; fail "apt-get install"; }
echo "test-package: installed tessera $version"
dpkg -L tessera | while read -r path; do [ -d "$path" ] || echo "$path"; done > "$scratch/installed"
for program in tessera-node tessera-broker tessera-job; do
    out=$("/usr/bin/$program" --version 2>&1)
    echo "$out" | grep -q "$version" || fail "$program --version says: $out"
done
out=$(QT_QPA_PLATFORM=offscreen XDG_RUNTIME_DIR="$scratch" /usr/bin/tessera --version 2>&1)
echo "$out" | grep -q "$version" || fail "tessera --version says: $out"
echo "test-package: every binary says $version"
cat > "$scratch/job.json" <<'JOB'
{ "name": "package check", "model": { "zoo": "mlp", "hidden": [16] }, "dataset": { "builtin": "fashion-mnist" },
  "optimizer": { "kind": "sgd", "lr": 0.05 },
  "training": { "rounds": 1, "shardsPerRound": 2, "localSteps": 10, "batchSize": 32, "seed": 1 }, "budget": "1" }
JOB
HOME="$scratch" /usr/bin/tessera-node --config /dev/null train-local "$scratch/job.json" --out "$scratch/out" > "$scratch/train" 2>&1 \
    || { cat "$scratch/train"; fail "the installed tessera-node could not train"; }
[ -f "$scratch/out/model.pt" ] || fail "train-local wrote no model"
echo "test-package: the installed tessera-node trained a job: $(tail -1 "$scratch/train")"
HOME="$scratch" /usr/bin/tessera-node devices > "$scratch/devices" 2>&1 || { cat "$scratch/devices"; fail "tessera-node devices"; }
systemd-analyze verify /lib/systemd/system/tessera-broker.service /lib/systemd/system/tessera-node.service \
    > "$scratch/units" 2>&1 || { cat "$scratch/units"; fail "systemd-analyze verify"; }
echo "test-package: systemd-analyze verify passed for both units"

# Purge: nothing left.
$sudo env DEBIAN_FRONTEND=noninteractive apt-get purge -y -q tessera > "$scratch/purge" 2>&1 || { cat "$scratch/purge"; fail "apt-get purge"; }
left=0
while read -r path; do
    if [ -e "$path" ]; then echo "left behind: $path"; left=$((left + 1)); fi
done < "$scratch/installed"
[ -e /etc/tessera ] && { echo "left behind: /etc/tessera"; left=$((left + 1)); }
[ "$left" -eq 0 ] || fail "$left files left after purge"
echo "test-package: purged; none of the $(wc -l < "$scratch/installed") installed files is left"
