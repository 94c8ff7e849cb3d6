# Checks shared by the plan-directory tests (source it; they set `fail=1` on failure).
# The program under test prints "corruptions N" and the statistics JSON.
field() { sed -n 's/.*"'"$1"'":\([0-9]*\).*/\1/p' <<<"$2" | tail -n 1; }
expect() {  # expect NAME OUTPUT FIELD OP VALUE
  local v
  v=$(field "$3" "$2")
  if [ -z "$v" ] || ! [ "$v" "$4" "$5" ]; then
    echo "FAIL  $1: $3=$v, expected $4 $5"
    fail=1
  else
    echo "ok    $1: $3=$v"
  fi
}
must_say() {  # must_say NAME OUTPUT TEXT
  if grep -q -- "$3" <<<"$2"; then echo "ok    $1: says '$3'"; else echo "FAIL  $1: no '$3' in:"; echo "$2"; fail=1; fi
}
share_at_least() {  # share_at_least NAME MIN OUTPUT: its "slab share" line is at least MIN
  local share
  share=$(awk '/^slab share/ {print $3}' <<<"$3")
  awk -v s="${share:-0}" -v m="$2" 'BEGIN { exit !(s >= m) }' && echo "ok    $1: slab share $share >= $2" \
    || { echo "FAIL  $1: slab share ${share:-none} < $2"; echo "$3"; fail=1; }
}
clean() {  # clean NAME OUTPUT RC
  if [ "$3" -ne 0 ] || ! grep -q "^corruptions 0$" <<<"$2"; then
    echo "FAIL  $1: exit $3"; echo "$2"; fail=1
  fi
}
# Runs as another user (setpriv, user 65534) need to open the preload library and the
# programs they run, and the folders they use: a build tree under a directory only its
# owner may enter (a clone in /root, or in a `mktemp -d`) is out of that user's reach,
# and so is a private TMPDIR.
other_user=(setpriv --reuid=65534 --regid=65534 --clear-groups)
# private_above PATH: the first folder on PATH's way down from / that user 65534 cannot
# enter (nothing when it can reach PATH).
private_above() {
  local p="" part
  local IFS=/
  for part in $1; do
    [ -n "$part" ] || continue
    p="$p/$part"
    "${other_user[@]}" test -x "$p" || { echo "$p ($(stat -c '%A %U' "$p"))"; return; }
  done
}
# other_user_dir TOP: makes and prints a folder (0755) that user 65534 can reach:
# TOP/other when it can reach TOP, else a fresh one under /tmp (the caller removes it);
# returns 1, saying why, when neither can be.
other_user_dir() {
  local top=$1 d blocked
  chmod 755 "$top"
  blocked=$(private_above "$top")
  if [ -z "$blocked" ]; then
    d="$top/other"
  else
    d=$(mktemp -d /tmp/replayalloc-other-user.XXXXXX) && chmod 755 "$d" || return 1
    if [ -n "$(private_above "$d")" ]; then
      rm -rf "$d"
      echo "user 65534 cannot enter $blocked, nor reach /tmp" >&2
      return 1
    fi
  fi
  mkdir -p -m 755 "$d" && chmod 755 "$d" && echo "$d"
}
# as_other_user_copies DIR FILE...: copies each FILE into DIR (made 0755), each
# world-readable (and runnable when it was), and checks that user 65534 can read them
# there; returns 1, saying why, when it cannot.
as_other_user_copies() {
  local d=$1 f
  shift
  mkdir -p -m 755 "$d" || return 1
  for f in "$@"; do
    cp "$f" "$d/" && chmod a+r "$d/$(basename "$f")" || return 1
    [ -x "$f" ] && chmod a+x "$d/$(basename "$f")"
  done
  for f in "$@"; do
    if ! "${other_user[@]}" test -r "$d/$(basename "$f")"; then
      echo "user 65534 cannot read $d/$(basename "$f")" >&2
      return 1
    fi
  done
}
