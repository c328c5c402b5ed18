#!/usr/bin/env bash
# tests/cli_vision.sh GEMMA_BIN SOURCE_DIR — images in the CLI: `gemma inspect` of an mmproj, `gemma run
# --mmproj --image` (placement, several images, the prompt's positions, bad images and misuse) and `gemma chat`
# with /image (the image is kept across turns: the second turn reuses the cache). The encoder is a tiny random
# one made for the default model (tests/data/vision/mmproj-640.gguf): plumbing, not quality. Exit 0 pass, 1
# fail, 77 skip.
set -u
bin=$1
src=$2
fail=0
check() { # description, command...
    local what=$1; shift
    if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fail=1; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mm=$src/tests/data/vision/mmproj-640.gguf
img=$src/tests/data/images

"$bin" inspect "$mm" >"$tmp/out" 2>"$tmp/err"
check "inspect mmproj exits 0" test $? -eq 0
check "inspect mmproj: family and projector" grep -q "vision encoder (mmproj) for Gemma 3, projector gemma3" "$tmp/out"
check "inspect mmproj: rows" grep -Eq "rows per image +4 of 640" "$tmp/out"
"$bin" inspect --json "$mm" >"$tmp/out" 2>"$tmp/err"
check "inspect mmproj --json" python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['n_tokens']==4 and d['embd_dim']==640" "$tmp/out"
"$bin" inspect "$src/tests/data/vision/bad_shape.gguf" >"$tmp/out" 2>"$tmp/err"
check "inspect bad mmproj exits 1" test $? -eq 1
check "inspect bad mmproj names the tensor" grep -q "attn_k.weight has shape" "$tmp/err"

"$bin" run --image "$img/rgba.png" -p x >"$tmp/out" 2>"$tmp/err"
check "--image without --mmproj exits 2" test $? -eq 2
check "--image without --mmproj message" grep -q "needs the model's vision encoder" "$tmp/err"

model=$("$bin" run --help | sed -n 's/.*(.gguf or HF folder; default \(.*\))$/\1/p')
if [ -z "${GEMMA_MODEL:-}" ] && [ ! -f "$model" ]; then
    echo "default model not installed ($model): skipping the generation checks"
    [ $fail -eq 0 ] && exit 77 || exit 1
fi

run() { "$bin" run --mmproj "$mm" -n 6 -v "$@" >"$tmp/out" 2>"$tmp/err"; }
run --image "$img/rgba.png" -p "Describe the image."
check "run with an image exits 0" test $? -eq 0
check "run: one image of 4 rows" grep -q "1 image encoded in .* (4 rows)" "$tmp/err"
# boi / eoi ids of the Gemma 3 vocabulary around the rows; 16 ids + 4 rows = 20 positions
check "run: markers in the prompt" grep -q "255999 256000" "$tmp/err"
check "run: prompt positions count the rows" grep -q "prompt: 20 tokens" "$tmp/err"
cp "$tmp/out" "$tmp/first"
run --image "$img/rgba.png" -p "Describe the image."
check "run: deterministic" cmp -s "$tmp/out" "$tmp/first"
# a Hugging Face folder as the encoder (tests/gen/gen_vision_hf_fixtures.py g3_640: config.json + safetensors)
"$bin" run --mmproj "$src/tests/data/vision/hf/g3_640" -n 6 -v --image "$img/rgba.png" -p "Describe the image." \
    >"$tmp/out" 2>"$tmp/err"
check "run --mmproj HF folder exits 0" test $? -eq 0
check "run --mmproj HF folder: 4 rows" grep -q "1 image encoded in .* (4 rows)" "$tmp/err"
"$bin" run --mmproj "$src/tests/data/vision/hf/g3" -n 2 --image "$img/rgba.png" -p x >"$tmp/out" 2>"$tmp/err"
check "run --mmproj HF folder of another width exits 1" test $? -eq 1
check "run --mmproj HF folder of another width: message" grep -q "rows of 20 values, but the model's width is 640" "$tmp/err"
# another image, another continuation: sampled (temperature 1.5, a fixed seed), because this random 4-row
# encoder moves the logits too little to change the 270M model's greedy text at every ISA level
run --image "$img/rgba.png" -p "Describe the image." -n 24 --temp 1.5 --seed 7
cp "$tmp/out" "$tmp/first"
run --image "$img/gray.jpg" -p "Describe the image." -n 24 --temp 1.5 --seed 7
check "run: another image, another continuation" bash -c "! cmp -s '$tmp/out' '$tmp/first'"
run --image "$img/rgba.png" --image "$img/lossy.webp" -p "Compare <__media__> with <__media__>."
check "run: two images at their markers" grep -q "2 images encoded in .* (8 rows)" "$tmp/err"
run --image "$img/rgba.png" -p "one <__media__> two <__media__>"
check "run: markers and images must agree (exit 1)" test $? -eq 1
check "run: markers message" grep -q "2 <__media__> markers for 1 images" "$tmp/err"
printf 'GIF89a\1\0\1\0' >"$tmp/x.gif"
run --image "$tmp/x.gif" -p x
check "run: a GIF is refused" test $? -eq 1
check "run: GIF message" grep -q "GIF" "$tmp/err"
head -c 60 "$img/gray.jpg" >"$tmp/cut.jpg"
run --image "$tmp/cut.jpg" -p x
check "run: a truncated JPEG is refused" test $? -eq 1
run --image "$tmp/nope.png" -p x
check "run: a missing image is refused" test $? -eq 1
run --mmproj "$src/tests/data/vision/f32.gguf" --image "$img/rgba.png" -p x
check "run: an encoder of another width is refused" grep -q "it is the encoder of another model" "$tmp/err"
run --image "$img/rgba.png" --naive -p x
check "run: --image with --naive exits 2" test $? -eq 2

printf '/image %s\nWhat is this?\nAnd now?\n/image %s/missing.png\n/image\nBye\n' "$img/rgba.png" "$tmp" |
    "$bin" chat --mmproj "$mm" -n 4 -v >"$tmp/out" 2>"$tmp/err"
check "chat with /image exits 0" test $? -eq 0
check "chat: image attached" grep -q "image 7x5 attached to the next turn: 4 rows" "$tmp/err"
check "chat: second turn reuses the image" grep -Eq "\(2[0-9] reused from the cache" "$tmp/err"
check "chat: a missing image is reported" grep -q "missing.png" "$tmp/err"
check "chat: /image without a path explains" grep -q "/image PATH" "$tmp/err"
printf '/image %s\nhi\n' "$img/rgba.png" | "$bin" chat -n 2 >"$tmp/out" 2>"$tmp/err"
check "chat: /image without --mmproj explains" grep -q "start gemma chat with --mmproj" "$tmp/err"
exit $fail
