"""tests/server/test_structured.py — structured output of `gemma serve` against oracles (issue 25's CI tests).

Run: python test_structured.py GEMMA_BINARY MODEL   (tests/cli_server_structured.sh does it under CTest)

- Every schema of tests/data/grammar/server_schemas.json (nested objects, arrays with bounds, enum, const,
  anyOf / oneOf tagged unions, $ref / $defs / definitions and recursive ones, patterns, lengths, integer
  ranges, formats, additionalProperties, prefixItems, type lists, allOf, root scalars and arrays): greedy one
  at a time, the same 8 in parallel (batched: identical to alone), and sampled (temperature 1, seeded)
  8 in parallel. Each output parses (json.loads) and validates with jsonschema's Draft202012Validator with
  formats checked, unless finish_reason is "length" (counted and reported).
- The official openai client's chat.completions.parse(response_format=<pydantic model>) for nested models
  (lists of sub-models, enums, Optional, Literal, dates): message.parsed is an instance of the model, or
  LengthFinishReasonError when cut.
- Streaming under response_format: the concatenated deltas validate and equal the non-streamed answer.
- Keywords the engine cannot honour are HTTP 400 naming the keyword (and its place).
- llama-server's `grammar` field with our GBNF files tests/data/grammar/{arithmetic,list}.gbnf: the text
  matches the grammar (a Python parser of the same language; a cut text must be a viable prefix).
"""
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai

from srvtest import Server, binary_and_model, run_tests

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data", "grammar")
ALL_SCHEMAS = json.load(open(os.path.join(DATA, "server_schemas.json"), encoding="utf-8"))
# Under ASan+UBSan (CI's second suite, ~10x slower) every 4th schema: each kind still runs there, and the whole
# set runs in the release suite. The other tests run each path there once: 2 streamed schemas (greedy and
# sampled), each pydantic model once (greedy or sampled), each GBNF grammar's variants in one batch.
SAN = bool(os.environ.get("GM_SANITIZER_BUILD"))
SCHEMAS = ALL_SCHEMAS[::4] if SAN else ALL_SCHEMAS
MAX_TOKENS = 400
SAMPLED_SEEDS = 1  # temperature-1 runs per schema (each seeded)


def client(env):
    return openai.OpenAI(base_url=env["srv"].base + "/v1", api_key="none", max_retries=0, timeout=600)


def validator(schema):
    cls = jsonschema.Draft202012Validator
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def rf_of(case):
    return {"type": "json_schema", "json_schema": {"name": case["name"], "schema": case["schema"], "strict": True}}


def ask(env, case, temperature=0, seed=None):
    r = client(env).chat.completions.create(
        model="m", messages=[{"role": "user", "content": case["prompt"]}], max_tokens=MAX_TOKENS,
        temperature=temperature, seed=seed, response_format=rf_of(case))
    ch = r.choices[0]
    return ch.message.content, ch.finish_reason


def check_output(case, content, finish, what):
    """content validates unless it was cut; returns True when it was cut (finish_reason "length")."""
    if finish == "length":
        return True
    assert finish == "stop", "%s %s: finish_reason %r" % (case["name"], what, finish)
    try:
        doc = json.loads(content)
    except ValueError as e:
        raise AssertionError("%s %s: not JSON (%s): %r" % (case["name"], what, e, content))
    errs = list(validator(case["schema"]).iter_errors(doc))
    assert not errs, "%s %s: invalid (%s): %r" % (case["name"], what, errs[0].message, content)
    return False


def parallel(fn, items, workers=8):
    with ThreadPoolExecutor(workers) as ex:
        return list(ex.map(fn, items))


# ---------------------------------------------------------------- the schema set

def test_schema_set(env):
    """The set itself: >= 30 well-formed Draft 2020-12 schemas covering the keywords issue 25 lists."""
    assert len(ALL_SCHEMAS) >= 30, len(ALL_SCHEMAS)
    assert len({c["name"] for c in ALL_SCHEMAS}) == len(ALL_SCHEMAS), "duplicate names"
    text = json.dumps([c["schema"] for c in ALL_SCHEMAS])
    for word in ('"$defs"', '"$ref"', '"definitions"', '"anyOf"', '"oneOf"', '"allOf"', '"enum"', '"const"',
                 '"pattern"', '"minLength"', '"maxLength"', '"minItems"', '"maxItems"', '"minimum"', '"maximum"',
                 '"exclusiveMinimum"', '"prefixItems"', '"additionalProperties": false',
                 '"additionalProperties": {', '"format": "date"', '"format": "time"', '"format": "date-time"',
                 '"format": "uuid"', '"format": "email"', "^[A-Z]{3}-[0-9]{4}$"):
        assert word in text, "no schema uses " + word
    for c in SCHEMAS:
        jsonschema.Draft202012Validator.check_schema(c["schema"])


def test_schemas_greedy(env):
    """Every schema at temperature 0, one request at a time: valid output."""
    alone, cut = {}, []
    for c in SCHEMAS:
        content, finish = ask(env, c)
        alone[c["name"]] = content
        if check_output(c, content, finish, "greedy"):
            cut.append(c["name"])
    env["alone"] = alone
    print("  %d schemas greedy, cut by max_tokens: %s" % (len(SCHEMAS), cut or "none"))
    assert len(cut) <= len(SCHEMAS) // 4, "too many outputs cut: %s" % cut


def test_schemas_batched_equal_alone(env):
    """The same greedy requests 8 at a time (batched with each other): each answer is the one it got alone."""
    assert "alone" in env, "needs test_schemas_greedy"
    got = parallel(lambda c: ask(env, c), SCHEMAS)
    for c, (content, finish) in zip(SCHEMAS, got):
        check_output(c, content, finish, "greedy, batched")
        assert content == env["alone"][c["name"]], "%s: batched %r != alone %r" % (
            c["name"], content, env["alone"][c["name"]])


def test_schemas_sampled(env):
    """Every schema at temperature 1 (seeded), 8 requests at a time: valid output."""
    jobs = [(c, 1000 + 17 * i + k) for i, c in enumerate(SCHEMAS) for k in range(SAMPLED_SEEDS)]
    got = parallel(lambda j: ask(env, j[0], temperature=1, seed=j[1]), jobs)
    cut = [j[0]["name"] for j, (content, finish) in zip(jobs, got)
           if check_output(j[0], content, finish, "seed %d" % j[1])]
    print("  %d sampled outputs, cut by max_tokens: %s" % (len(jobs), cut or "none"))
    assert len(cut) <= len(jobs) // 4, "too many outputs cut: %s" % cut
    # seeded: the same seed again gives the same document
    c, seed = jobs[0]
    assert ask(env, c, temperature=1, seed=seed)[0] == got[0][0]


# ---------------------------------------------------------------- streaming

def test_streaming(env):
    """stream=True with response_format: the deltas concatenate to a valid document (the non-streamed one at
    temperature 0); the last choice chunk has finish_reason."""
    c_ = client(env)
    cases = (("line_items", 0), ("recursive_tree", 0), ("oneof_event", 1), ("formats_dates", 1))
    for name, temp in cases[1:3] if SAN else cases:
        case = next(c for c in ALL_SCHEMAS if c["name"] == name)
        pieces, finish = [], None
        for ev in c_.chat.completions.create(model="m", messages=[{"role": "user", "content": case["prompt"]}],
                                             max_tokens=MAX_TOKENS, temperature=temp, seed=3,
                                             response_format=rf_of(case), stream=True):
            if ev.choices:
                pieces.append(ev.choices[0].delta.content or "")
                finish = ev.choices[0].finish_reason or finish
        text = "".join(pieces)
        check_output(case, text, finish, "streamed")
        if temp == 0:
            alone = env.get("alone", {}).get(name) or ask(env, case)[0]  # (under ASan not every schema ran alone)
            assert text == alone, (text, alone)
        if temp == 1:
            assert text == ask(env, case, temperature=1, seed=3)[0], "streamed != non-streamed, same seed"


# ---------------------------------------------------------------- pydantic through the openai client

def test_pydantic_parse(env):
    """client.chat.completions.parse(response_format=Model) for nested pydantic v2 models (the client sends a
    strict schema: every property required, additionalProperties false, Optional as anyOf with null)."""
    import datetime
    import enum
    from typing import Annotated, List, Literal, Optional

    from openai.lib._pydantic import to_strict_json_schema
    from pydantic import BaseModel, Field

    class Status(str, enum.Enum):
        draft = "draft"
        sent = "sent"
        paid = "paid"

    class LineItem(BaseModel):
        sku: str = Field(pattern=r"^[A-Z]{2}[0-9]{3}$")
        quantity: int = Field(ge=1, le=99)
        unit_price: float = Field(ge=0)

    class Invoice(BaseModel):
        kind: Literal["invoice"]
        number: str = Field(max_length=12)
        status: Status
        items: List[LineItem] = Field(min_length=1, max_length=3)
        note: Optional[str] = Field(max_length=40)

    class Ingredient(BaseModel):
        name: str = Field(max_length=20)
        amount: int = Field(ge=1, le=1000)
        unit: Literal["g", "ml", "pcs"]

    class Step(BaseModel):
        order: int = Field(ge=1, le=9)
        text: str = Field(max_length=60)

    class Recipe(BaseModel):
        title: str = Field(max_length=30)
        vegetarian: bool
        difficulty: Literal["easy", "medium", "hard"]
        ingredients: List[Ingredient] = Field(max_length=4)
        steps: List[Step] = Field(max_length=3)

    class Address(BaseModel):
        city: str = Field(max_length=20)
        country: Literal["FR", "DE", "US", "JP"]

    class Person(BaseModel):
        name: str = Field(max_length=24)
        born: datetime.date
        home: Address
        work: Optional[Address]
        tags: List[Annotated[str, Field(max_length=10)]] = Field(max_length=3)

    class Team(BaseModel):
        name: str = Field(max_length=20)
        lead: Person
        members: List[Person] = Field(max_length=2)

    c = client(env)
    jobs = [(model, prompt, temp) for model, prompt in ((Invoice, "Write an invoice for two items."),
                                                        (Recipe, "Give me a pancake recipe."),
                                                        (Team, "Describe a small team."))
            for temp in (0, 1)]
    if SAN:
        jobs = [jobs[0], jobs[3], jobs[4]]  # Invoice greedy, Recipe sampled, Team greedy

    def one(job):
        model, prompt, temp = job
        try:
            r = c.chat.completions.parse(model="m", messages=[{"role": "user", "content": prompt}],
                                         response_format=model, max_tokens=MAX_TOKENS, temperature=temp, seed=11)
        except openai.LengthFinishReasonError:
            return "%s t=%d cut" % (model.__name__, temp)
        msg = r.choices[0].message
        assert r.choices[0].finish_reason == "stop", r.choices[0].finish_reason
        assert isinstance(msg.parsed, model), (model, msg.content)
        # the JSON is valid under the strict schema the client sent, too
        validator(to_strict_json_schema(model)).validate(json.loads(msg.content))
        return "%s t=%d parsed" % (model.__name__, temp)
    res = parallel(one, jobs, workers=6)
    print("  " + ", ".join(res))
    assert sum("parsed" in x for x in res) >= len(jobs) * 2 // 3, res
    # cut on purpose: the client raises LengthFinishReasonError
    try:
        c.chat.completions.parse(model="m", messages=[{"role": "user", "content": "Give me a recipe."}],
                                 response_format=Recipe, max_tokens=5, temperature=0)
        raise AssertionError("5 tokens made a whole recipe")
    except openai.LengthFinishReasonError:
        pass


# ---------------------------------------------------------------- refusals

UNSUPPORTED = [
    ({"type": "object", "not": {"required": ["a"]}}, "not"),
    ({"if": {"type": "string"}, "then": {"maxLength": 3}}, "if"),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
    ({"type": "object", "patternProperties": {"^x": {"type": "string"}}}, "patternProperties"),
    ({"type": "object", "propertyNames": {"maxLength": 3}}, "propertyNames"),
    ({"type": "object", "minProperties": 1}, "minProperties"),
    ({"type": "integer", "multipleOf": 3}, "multipleOf"),
    ({"type": "array", "contains": {"type": "integer"}}, "contains"),
    ({"type": "object", "unevaluatedProperties": False}, "unevaluatedProperties"),
    ({"type": "object", "dependentRequired": {"a": ["b"]}}, "dependentRequired"),
    ({"type": "string", "format": "hostname"}, "hostname"),
    ({"$ref": "https://example.com/schema.json"}, "$ref"),
    ({"type": "object", "properties": {"a": {"type": "array", "items": {"not": {"type": "null"}}}}},
     "/properties/a/items"),
]


def test_unsupported_keywords(env):
    """A keyword that cannot be honoured is HTTP 400 naming it, through response_format (openai client) and
    llama-server's json_schema (raw HTTP); never unconstrained output."""
    c = client(env)
    for schema, word in UNSUPPORTED:
        try:
            c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}], max_tokens=2,
                                      response_format={"type": "json_schema",
                                                       "json_schema": {"name": "x", "schema": schema}})
            raise AssertionError("accepted %r" % schema)
        except openai.BadRequestError as e:
            assert e.status_code == 400 and word in e.body["message"], (word, e.body)
        status, body = env["srv"].post("/v1/completions", {"prompt": "x", "max_tokens": 2, "json_schema": schema})
        assert status == 400, (status, body)
        assert word in body["error"]["message"], (word, body)


# ---------------------------------------------------------------- GBNF: our arithmetic and list grammars

END = -1  # the input ended while the parser could still go on: a viable prefix


def lit(t):
    def p(s, i):
        if s.startswith(t, i):
            return {i + len(t)}
        return {END} if t.startswith(s[i:]) else set()
    return p


def cls(pred):
    def p(s, i):
        if i == len(s):
            return {END}
        return {i + 1} if pred(s[i]) else set()
    return p


def seq(*ps):
    def p(s, i):
        at = {i}
        for q in ps:
            nxt = set()
            for j in at:
                nxt |= {END} if j == END else q(s, j)
            at = nxt
        return at
    return p


def alt(*ps):
    return lambda s, i: set().union(*(q(s, i) for q in ps))


def star(q):
    def p(s, i):
        seen, todo = {i}, [i]
        while todo:
            j = todo.pop()
            if j == END:
                continue
            for k in q(s, j):
                if k not in seen:
                    seen.add(k)
                    todo.append(k)
        return seen
    return p


def plus(q):
    return seq(q, star(q))


def rule(f):  # a forward reference, for recursion
    return lambda s, i: f()(s, i)


# arithmetic.gbnf: line+ ; line = sum "=" blanks operand "\n"; operand = (name | number | "(" blanks sum ")") blanks
_blanks = star(cls(lambda ch: ch in " \t\n"))
_name = seq(cls(lambda ch: "a" <= ch <= "z"), star(cls(lambda ch: ch.isascii() and (ch.islower() or ch.isdigit() or ch == "_"))))
_number = plus(cls(lambda ch: "0" <= ch <= "9"))
_operand = seq(alt(_name, _number, seq(lit("("), _blanks, rule(lambda: _sum), lit(")"))), _blanks)
_sum = seq(_operand, star(seq(cls(lambda ch: ch in "+-*/"), _operand)))
ARITHMETIC = plus(seq(_sum, lit("="), _blanks, _operand, lit("\n")))
# list.gbnf: ("- " text "\n")+ with text: one or more characters that are not line breaks
LIST = plus(seq(lit("- "), plus(cls(lambda ch: ch not in "\n\r\x0b\x0c\x85\u2028\u2029")), lit("\n")))


def matches(p, s):
    return len(s) in p(s, 0)


def viable(p, s):
    ends = p(s, 0)
    return END in ends or len(s) in ends


def test_python_grammar_checkers(env):
    """The Python parsers agree with the cases tests/test_gbnf.c checks on the GBNF files."""
    assert matches(ARITHMETIC, "1+2=3\n") and matches(ARITHMETIC, "(a *b1) -4 = x_2\nq=1\n")
    assert viable(ARITHMETIC, "(1+") and not matches(ARITHMETIC, "(1+")
    assert not viable(ARITHMETIC, "1+=3\n") and not viable(ARITHMETIC, "A=1\n") and not viable(ARITHMETIC, "1+ 2=3\n")
    assert matches(LIST, "- one\n- two items\n") and viable(LIST, "- one") and not matches(LIST, "- one")
    assert not viable(LIST, "-one\n") and not viable(LIST, "- a\u2028b\n") and not viable(LIST, "- \n")


EOS_BIAS = {"1": 12, "106": 12}  # <eos>, <end_of_turn> of the Gemma 3 vocabulary


def test_gbnf_grammar_field(env):
    """`grammar` = tests/data/grammar/arithmetic.gbnf and list.gbnf through /v1/completions and chat (greedy and
    sampled; and with <eos> biased up so that it stops where the grammar can end): the text matches the
    grammar, or is a viable prefix of it when cut by max_tokens."""
    c = client(env)
    cases = (("arithmetic.gbnf", ARITHMETIC, "Some equations, one per line:\n1+1=2\n2*3=6\n"),
             ("list.gbnf", LIST, "Three fruits as a bulleted list:\n"))
    jobs = []
    for fname, parser, prompt in cases:
        grammar = open(os.path.join(DATA, fname), encoding="utf-8").read()
        for k, (temp, seed, bias) in enumerate(((0, None, None), (1, 4, None), (1, 5, None), (0, None, EOS_BIAS))):
            # under ASan one batch of 8: each variant once, chat and completion alternating
            jobs += [(fname, parser, prompt, grammar, temp, seed, bias, chat) for chat in ((k % 2 == 1,) if SAN else (False, True))]

    def one(job):
        fname, parser, prompt, grammar, temp, seed, bias, chat = job
        extra = {"grammar": grammar}
        if bias:
            extra["logit_bias"] = bias
        if chat:
            ch = c.chat.completions.create(model="m", messages=[{"role": "user", "content": prompt}], max_tokens=60,
                                           temperature=temp, seed=seed, extra_body=extra).choices[0]
            return ch.message.content, ch.finish_reason
        ch = c.completions.create(model="m", prompt=prompt, max_tokens=60, temperature=temp, seed=seed,
                                  extra_body=extra).choices[0]
        return ch.text, ch.finish_reason
    outs = parallel(one, jobs)
    for job, (text, finish) in zip(jobs, outs):
        fname, parser, bias = job[0], job[1], job[6]
        what = "%s %s t=%d%s" % (fname, "chat" if job[7] else "completion", job[4], " eos-biased" if bias else "")
        if bias:  # <eos> / <end_of_turn> made likely: the model stops where the grammar can end
            assert finish == "stop", (what, finish, text)
        if finish == "stop":
            assert matches(parser, text), "%s: does not match: %r" % (what, text)
        else:
            assert finish == "length", finish
            assert viable(parser, text), "%s: cut, not a prefix: %r" % (what, text)
        if fname == "list.gbnf":
            assert all(line.startswith("- ") for line in text.split("\n")[:-1]), text
    print("  " + ", ".join("%s %s" % (j[0][:4] + ("/chat" if j[7] else "") + " t=%d" % j[4] + ("b" if j[6] else ""), f)
                           for j, (_, f) in zip(jobs, outs)))


def main():
    binary, model = binary_and_model()
    env = {"bin": binary, "model": model}
    t0 = time.time()
    with Server(binary, model=model) as srv:
        env["srv"] = srv
        rc = run_tests([
            test_schema_set, test_python_grammar_checkers, test_schemas_greedy, test_schemas_batched_equal_alone,
            test_schemas_sampled, test_streaming, test_pydantic_parse, test_unsupported_keywords,
            test_gbnf_grammar_field,
        ], env)
        if rc:
            print("".join(srv.log[-30:]))
    print("total %.1fs" % (time.time() - t0))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
