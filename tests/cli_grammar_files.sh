#!/usr/bin/env bash
# tests/cli_grammar_files.sh — GBNF files through `gemma run --grammar-file` (tiny model, 24 tokens):
# our own tests/data/grammar/*.gbnf, and every .gbnf of llama.cpp's grammars/ folder when one is on this
# machine ($GM_LLAMA_CPP_GRAMMARS, else the llama.cpp tree of the llama-cpp-python source package unpacked
# under /tmp/lcp; skipped with a message when there is none: its files are not in this repository). Each
# must compile and generate (exit 0), or be refused with a clear "grammar LINE:COL: ..." error (exit 1);
# a crash, a hang or an unexplained failure fails the test. Grammars we are known not to honour are listed
# in KNOWN_REFUSED with the reason. Also: what we cannot honour (token references, left recursion, rules
# that never finish, undefined rules) is a clear error, never a crash.
# usage: cli_grammar_files.sh <gemma binary> <source dir>
set -u
. "$2/tests/support/cli_common.sh"
KNOWN_REFUSED=""   # "name.gbnf:why name.gbnf:why" — none: all of llama.cpp's grammars/ compile

# run_grammar FILE -> sets rc and msg
run_grammar() {
  timeout 120 "$GEMMA" run -m "$TINY" -p "x" -n 24 -t 1 --grammar-file "$1" >"$TMP/out" 2>"$TMP/err"
  rc=$?
  msg=$(grep -v '^load:' "$TMP/err" | head -c 300 | tr '\n' ' ')
}

check_file() { # FILE LABEL
  local f=$1 label=$2 name
  name=$(basename "$f")
  run_grammar "$f"
  if [ $rc -eq 0 ]; then
    ok "$label $name compiles and generates: $(head -c 40 "$TMP/out" | tr '\n' '|')"
  elif [ $rc -eq 1 ] && [[ "$msg" == *"grammar "[0-9]*:[0-9]*": "* ]]; then
    case " $KNOWN_REFUSED " in
      *" $name:"*) ok "$label $name refused as known: $msg" ;;
      *) bad "$label $name refused: $msg" ;;
    esac
  else
    bad "$label $name: exit $rc (crash, hang or unclear error): $msg"
  fi
}

for f in "$SRC"/tests/data/grammar/*.gbnf; do check_file "$f" ours; done

LCP=${GM_LLAMA_CPP_GRAMMARS:-}
if [ -z "$LCP" ]; then
  for d in /tmp/lcp/llama_cpp_python-*/vendor/llama.cpp/grammars; do [ -d "$d" ] && LCP=$d; done
fi
if [ -n "$LCP" ] && [ -d "$LCP" ] && ls "$LCP"/*.gbnf >/dev/null 2>&1; then
  n=0
  for f in "$LCP"/*.gbnf; do check_file "$f" llama.cpp; n=$((n + 1)); done
  echo "llama.cpp grammars from $LCP: $n files"
else
  echo "skip: llama.cpp's grammars/ folder is not on this machine (set GM_LLAMA_CPP_GRAMMARS to it): only ours checked"
fi

# what cannot be honoured: a clear error naming the place, exit 1
while IFS= read -r line; do
  text=${line% => *}
  want=${line##* => }
  printf '%s\n' "$text" >"$TMP/g.gbnf"
  run_grammar "$TMP/g.gbnf"
  if [ $rc -eq 1 ] && [[ "$msg" == *"$want"* ]]; then ok "refused: $want"; else bad "exit $rc for '$text' (want '$want'): $msg"; fi
done <<'CASES'
root ::= <[12]> "a" => grammar 1:10: token references
root ::= "a" !<eos> => grammar 1:14: token references
root ::= root "x" | "y" => left-recursive
root ::= "x" root => can never finish
root ::= undefined => undefined rule 'undefined'
root ::= [b-a] => grammar 1:
root ::= "a" ( => expecting ')'
CASES
exit $fail
