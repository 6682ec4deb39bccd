#!/usr/bin/env bash
# Installs every Debian 12 package that Tessera's build, tests, demo and benchmarks need.
# Idempotent: installs only what is missing, so a second run costs one dpkg query.
set -euo pipefail

packages=(
    # toolchain
    build-essential cmake ninja-build ccache pkg-config clang clang-format clang-tidy universal-ctags
    # Qt 6 (Core, Gui, Widgets, Sql, Network, Test, Concurrent; Charts needs the OpenGL dev files)
    qt6-base-dev qt6-base-dev-tools libqt6sql6-sqlite qt6-charts-dev libqt6opengl6-dev qt6-svg-dev
    # the control API and its web dashboard (docs/CONTROL.md)
    qt6-httpserver-dev qt6-websockets-dev
    libgl-dev
    # storage, networking, keys
    libsqlite3-dev sqlite3 libzmq3-dev cppzmq-dev libsodium-dev zlib1g-dev libssl-dev libzstd-dev
    # the broker's store on PostgreSQL (docs/STORE.md): libpq, and a server the tests start themselves
    libpq-dev postgresql-15
    # the blob swarm (docs/SWARM.md): BitTorrent, its Python binding for the tests' hostile peers, and
    # the openssl tool (a stranger's own certificate, one the broker's authority signs)
    libtorrent-rasterbar-dev python3-libtorrent openssl
    # LibTorch on OpenMP OpenBLAS (the pthread variant or the reference BLAS train ~9x slower)
    libtorch-dev libopenblas0-openmp
    # data and the independent PyTorch peer used by tests (Debian's /usr/bin/python3)
    dataset-fashion-mnist fortunes python3-torch python3-zmq python3-numpy python3-nacl
    # GUI tests and screenshots
    xvfb xauth trayer imagemagick
    # the web dashboard's browser tests (tests/browser: playwright-core from npm drives Debian's
    # Chromium, puppeteer-core its Firefox ESR over WebDriver BiDi)
    chromium firefox-esr fonts-dejavu-core
    # packaging (make package) and its test: icons, man pages, lintian
    librsvg2-bin help2man lintian desktop-file-utils appstream
    g++-aarch64-linux-gnu qemu-user file
)

# Node.js and npm for the browser test: the machine's own where it has them (Debian's nodejs would
# conflict with another vendor's), else Debian's.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    packages+=(nodejs npm)
fi

root=$(cd "$(dirname "$0")/.." && pwd)
# playwright-core and puppeteer-core, pinned by tests/browser/package-lock.json; neither downloads a
# browser of its own.
install_browser_driver() {
    if [ ! -f "$root/tests/browser/node_modules/playwright-core/package.json" ] \
        || [ ! -f "$root/tests/browser/node_modules/puppeteer-core/package.json" ]; then
        echo "install-deps: npm ci in tests/browser (playwright-core, puppeteer-core)"
        (cd "$root/tests/browser" && npm ci --no-audit --no-fund --loglevel=error)
    fi
}

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

# A pthread OpenBLAS next to the OpenMP one makes LibTorch's thread count unpredictable.
conflicting=()
if dpkg-query -W -f='${Status}' libopenblas0-pthread 2>/dev/null | grep -q 'install ok installed'; then
    conflicting+=(libopenblas0-pthread-)
fi

if [ ${#missing[@]} -eq 0 ] && [ ${#conflicting[@]} -eq 0 ]; then
    echo "install-deps: all ${#packages[@]} packages present"
    install_browser_driver
    exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
    sudo=(sudo)
fi

apt_options=(-o DPkg::Lock::Timeout=600 -y -q --no-install-recommends)
export DEBIAN_FRONTEND=noninteractive

echo "install-deps: installing ${missing[*]} ${conflicting[*]}"
"${sudo[@]}" apt-get -o DPkg::Lock::Timeout=600 update -q
"${sudo[@]}" apt-get install "${apt_options[@]}" "${missing[@]}" "${conflicting[@]}"

# Point the BLAS and LAPACK alternatives at OpenBLAS (OpenMP) even if the reference BLAS came in too.
arch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)
for lib in libblas.so.3 liblapack.so.3; do
    target=/usr/lib/$arch/openblas-openmp/$lib
    if [ -e "$target" ]; then
        "${sudo[@]}" update-alternatives --set "$lib-$arch" "$target" >/dev/null
    fi
done
install_browser_driver
echo "install-deps: done"
