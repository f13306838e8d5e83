#!/usr/bin/env bash
# sddaq store write and sddaq inspect from the command line: both formats give back the counts,
# flags and attributes written; --dump prints the events; --verify passes on a good file and
# fails (exit 1) on a flipped byte and on a truncated raw file, which still reads up to its last
# whole record; an existing file is not overwritten; bad arguments exit 2.
# Usage: bash test_store_cli.sh PATH/TO/sddaq
set -u -o pipefail

sddaq=${1:?usage: test_store_cli.sh PATH/TO/sddaq}
dir=$(mktemp -d "${TMPDIR:-/tmp}/store-cli.XXXXXX")
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
export SDDAQ_LOG=none
py=$(command -v python3) || { echo "skipped: python3 (for JSON) not installed"; exit 77; }

# field JSON KEY: one top-level value of a JSON object.
field() { "$py" -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

for fmt in hdf5 raw; do
    f=$dir/run.$fmt
    "$sddaq" store write "$f" -f "$fmt" -n 300 -s 0 --max-size 200K --flag-every 4 --run 77 \
        --topology "stages: [ru, bu]" >"$dir/w.txt" || fail "$fmt: store write"
    [ -f "$f" ] && [ ! -e "$f.partial" ] || fail "$fmt: file not renamed into place"
    out=$("$sddaq" inspect "$f" --verify) || fail "$fmt: inspect --verify on a good file"
    grep -q "^kind  *$fmt" <<<"$out" || fail "$fmt: kind line: $out"
    grep -q "^records  *300$" <<<"$out" || fail "$fmt: records line: $out"
    grep -q "^flags  *225 clean, 75 flagged; bit 0: 75$" <<<"$out" || fail "$fmt: flags: $out"
    grep -q "^ids  *first 0, last 299$" <<<"$out" || fail "$fmt: ids: $out"
    grep -q "^checksums  *ok (0 of 300 bad)$" <<<"$out" || fail "$fmt: checksums: $out"
    grep -q "^topology .*stages: \[ru, bu\]" <<<"$out" || fail "$fmt: topology: $out"
    json=$("$sddaq" inspect "$f" --json --dump 5) || fail "$fmt: inspect --json"
    [ "$(field "$json" run_number)" = 77 ] || fail "$fmt: run_number in $json"
    [ "$(field "$json" records)" = 300 ] || fail "$fmt: records in $json"
    [ "$(field "$json" kind)" = "$fmt" ] || fail "$fmt: kind in $json"
    n=$("$py" -c 'import json,sys; e=json.loads(sys.argv[1])["events"]; print(len(e), e[1]["id"], e[0]["flags"], e[0]["head"][:4])' "$json")
    [ "$n" = "5 1 1 0007" ] || fail "$fmt: dumped events: $n"
    lines=$("$sddaq" inspect "$f" --dump 3 | grep -cE '^ +[0-9]+ +[0-9]+ +[0-9]+ 0x')
    [ "$lines" = 3 ] || fail "$fmt: --dump 3 printed $lines event lines"
    "$sddaq" store write "$f" -f "$fmt" -n 1 >/dev/null 2>&1 && fail "$fmt: overwrote a run file"
    "$sddaq" store write "$f" -f "$fmt" -n 1 --overwrite >/dev/null || fail "$fmt: --overwrite"
done

# Damage: one flipped byte in a raw payload, found by --verify.
f=$dir/bad.raw
"$sddaq" store write "$f" -f raw -n 50 -s 1000 >/dev/null || fail "write bad.raw"
"$py" - "$f" <<'PY' || fail "flip a byte"
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(56 + 40 * 11 + 1000 * 10 + 500)  # header, 10 records, middle of the 11th payload
    b = f.read(1)
    f.seek(-1, 1)
    f.write(bytes([b[0] ^ 0xFF]))
PY
out=$("$sddaq" inspect "$f" --verify) && fail "--verify passed a corrupt file"
grep -q "^checksums  *MISMATCH (1 of 50 bad)$" <<<"$out" || fail "corrupt: $out"
out=$("$sddaq" inspect "$f" --dump 12)
grep -qE '^ +10 +10 .*ECORRUPT$' <<<"$out" || fail "corrupt event not marked in the dump: $out"

# A raw file cut in the middle of record 20: 20 records, a truncated tail, --verify fails.
f=$dir/cut.raw
"$sddaq" store write "$dir/good.raw" -f raw -n 50 -s 1000 >/dev/null || fail "write good.raw"
head -c $((56 + 1040 * 20 + 300)) "$dir/good.raw" >"$f"
out=$("$sddaq" inspect "$f" --verify) && fail "--verify passed a truncated file"
grep -q "^records  *20$" <<<"$out" || fail "truncated: $out"
grep -q "corrupt 0, skipped 0 B, truncated tail 300 B" <<<"$out" || fail "truncated tail: $out"
grep -q "^ids  *first 0, last 19$" <<<"$out" || fail "truncated ids: $out"
grep -q "no index" <<<"$out" || fail "truncated file claims an index: $out"

# Errors: a missing file, a file that is not a run, bad arguments.
"$sddaq" inspect "$dir/nope" >/dev/null 2>&1
[ $? = 1 ] || fail "missing file: want exit 1"
echo "not a run" >"$dir/text"
"$sddaq" inspect "$dir/text" >/dev/null 2>&1
[ $? = 1 ] || fail "not a run file: want exit 1"
"$sddaq" store write "$dir/x/y/z.h5" >/dev/null 2>&1
[ $? = 1 ] || fail "unwritable path: want exit 1"
for args in "inspect" "inspect a b" "inspect $f --dump x" "inspect $f --bogus" "store" \
    "store bogus" "store write" "store write $dir/q -f bogus" "store write $dir/q -n x" \
    "store write $dir/q -s 10 --max-size 5" "store write $dir/q --buffer 1"; do
    # shellcheck disable=SC2086
    "$sddaq" $args >/dev/null 2>&1
    rc=$?
    [ $rc = 2 ] || fail "sddaq $args: exit $rc, want 2"
done
[ ! -e "$dir/q" ] && [ ! -e "$dir/q.partial" ] || fail "a refused command left a file"
echo "store cli: ok"
