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
clean() {  # clean NAME OUTPUT RC
  if [ "$3" -ne 0 ] || ! grep -q "^corruptions 0$" <<<"$2"; then
    echo "FAIL  $1: exit $3"; echo "$2"; fail=1
  fi
}
