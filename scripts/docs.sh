#!/usr/bin/env bash
# The documentation site: README.md as its home page and every page of docs/, built with mkdocs
# and the Material theme (both from PyPI, pinned below) into .build/docs-site.
#
#   scripts/docs.sh            # serve it on http://127.0.0.1:8000 (rebuilt when README.md or docs/ change)
#   scripts/docs.sh build      # build it once with --strict: a broken link or anchor fails (what CI runs)
#   PORT=9000 scripts/docs.sh  # another port
#
# Needs python3 with venv; mkdocs is installed into $VENV (default .build/docs-venv).
set -euo pipefail
export NO_MKDOCS_2_WARNING=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

MKDOCS_VERSION=1.6.1
MATERIAL_VERSION=9.8.2
VENV=${VENV:-"$ROOT/.build/docs-venv"}
SRC="$ROOT/.build/docs-src"
PORT=${PORT:-8000}

if [[ ! -x "$VENV/bin/mkdocs" ]] || [[ "$("$VENV/bin/mkdocs" --version 2>/dev/null)" != *"version $MKDOCS_VERSION "* ]] \
    || ! "$VENV/bin/pip" show mkdocs-material 2>/dev/null | grep -qx "Version: $MATERIAL_VERSION"; then
    echo "== installing mkdocs $MKDOCS_VERSION and mkdocs-material $MATERIAL_VERSION into $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q "mkdocs==$MKDOCS_VERSION" "mkdocs-material==$MATERIAL_VERSION"
fi

# Stage README.md and docs/ as the site's sources. The README links into docs/ and to LICENSE
# from the repository's root; on the site they are pages beside it.
stage() {
    rm -rf "$SRC"
    mkdir -p "$SRC"
    cp -R docs/. "$SRC/"
    sed -e 's#](docs/#](#g' -e 's#](LICENSE)#](license.md)#g' README.md > "$SRC/index.md"
    { echo "# License"; echo; echo '```text'; cat LICENSE; echo '```'; } > "$SRC/license.md"
}

case "${1:-serve}" in
    build)
        stage
        "$VENV/bin/mkdocs" build --strict --clean -f mkdocs.yml
        echo "== site in .build/docs-site"
        ;;
    serve)
        stage
        # mkdocs watches the staged copy; a loop stages again whenever README.md or docs/ change.
        (
            last=""
            while sleep 1; do
                now=$(find README.md LICENSE docs -type f -printf '%T@ %p\n' 2>/dev/null | sort | md5sum)
                if [[ -n "$last" && "$now" != "$last" ]]; then stage; fi
                last=$now
            done
        ) &
        watcher=$!
        trap 'kill $watcher 2>/dev/null' EXIT
        "$VENV/bin/mkdocs" serve --strict -f mkdocs.yml -a "127.0.0.1:$PORT"
        ;;
    *)
        echo "usage: scripts/docs.sh [serve|build]" >&2
        exit 2
        ;;
esac
