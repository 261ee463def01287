#!/usr/bin/python3
"""Regenerates the golden outputs of tokenizer/chat with Python jinja2.

The environment mimics Hugging Face transformers' chat-template rendering
(transformers/utils/chat_template_utils.py, _compile_jinja_template):

    ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                  extensions=[AssistantTracker, loopcontrols])
    filters["tojson"] = json.dumps(x, ensure_ascii=False, indent=None,
                                   separators=None, sort_keys=False)
    globals["raise_exception"] raises TemplateError(message)
    globals["strftime_now"] = datetime.now().strftime(format)

and renders with messages=..., tools=<list or None>, documents=None,
add_generation_prompt=..., plus enable_thinking / bos_token / eos_token when
given.  strftime_now uses the fixed time FIXED_NOW so goldens are stable (the
Go tests pass the same time).

Messages are normalized exactly like chat.messageDict in render.go: keys
role, content ("" when null), reasoning_content (only when non-empty),
tool_calls ([{"id"?, "type": "function", "function": {"name", "arguments"?}}]),
name, tool_call_id (only when non-empty).

Usage (from the repository root):
    /usr/bin/python3 testdata/chat/render.py            # rewrite all goldens
    /usr/bin/python3 testdata/chat/render.py --check    # verify, exit 1 on diff
    /usr/bin/python3 testdata/chat/render.py [--check] conformance   # only these sets
                    (sets: golden, llamacpp, prompts, conformance)

Requires Debian's python3-jinja2 (3.1.x): apt-get install -y python3-jinja2.
Outputs:
  golden/<template>/<conversation>.txt    rendered text, or
  golden/<template>/<conversation>.err    "ExceptionClass: message" on error
  golden-llamacpp.json                    SHA-256 of every llama.cpp template
                                          (testdata/llamacpp/src/models/templates)
                                          rendered with every conversation
  golden-prompts.json                     SHA-256 of the built-in calibration prompts
                                          (calib/prompts/data) rendered with each
                                          template in templates/
  conformance/expected.json               results of conformance/cases.json, with the
                                          jinja2 version that produced them
"""

import datetime
import hashlib
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
FIXED_NOW = datetime.datetime(2025, 7, 4, 9, 5, 3)

# Templates from the llama.cpp source tree that setup.sh clones; the Go test
# reads them from the same place.
LLAMACPP_TEMPLATES = os.path.join(ROOT, "testdata", "llamacpp", "src", "models", "templates")


class AssistantTracker(Extension):
    """transformers' {% generation %} tag: renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def normalize_message(m):
    out = {"role": m["role"], "content": m.get("content") or ""}
    if m.get("reasoning_content"):
        out["reasoning_content"] = m["reasoning_content"]
    calls = []
    for tc in m.get("tool_calls") or []:
        fn = tc.get("function", tc)
        f = {"name": fn["name"]}
        if fn.get("arguments") is not None:
            f["arguments"] = fn["arguments"]
        c = {}
        if tc.get("id"):
            c["id"] = tc["id"]
        c["type"] = "function"
        c["function"] = f
        calls.append(c)
    if calls:
        out["tool_calls"] = calls
    if m.get("name"):
        out["name"] = m["name"]
    if m.get("tool_call_id"):
        out["tool_call_id"] = m["tool_call_id"]
    return out


def render_conversation(env, source, conv, extra=None):
    tmpl = env.from_string(source)
    kwargs = dict(
        messages=[normalize_message(m) for m in conv["messages"]],
        tools=conv.get("tools") or None,
        documents=None,
        add_generation_prompt=bool(conv.get("add_generation_prompt", False)),
    )
    if "enable_thinking" in conv:
        kwargs["enable_thinking"] = conv["enable_thinking"]
    for tok in ("bos_token", "eos_token"):
        if conv.get(tok):
            kwargs[tok] = conv[tok]
    if extra:
        for k, v in extra.items():
            kwargs.setdefault(k, v)
    return tmpl.render(**kwargs)


def result_text(fn):
    """Returns (suffix, text) for a render: (.txt, output) or (.err, error)."""
    try:
        return ".txt", fn()
    except Exception as e:  # noqa: BLE001 - every template failure is a result
        msg = str(e).replace("\n", " ")
        return ".err", f"{type(e).__name__}: {msg}\n"


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def write_or_check(path, text, check, problems):
    if check:
        old = None
        if os.path.exists(path):
            with open(path, encoding="utf-8", newline="") as f:
                old = f.read()
        if old != text:
            problems.append(path)
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def conversations():
    d = os.path.join(HERE, "conversations")
    for name in sorted(os.listdir(d)):
        if name.endswith(".json"):
            yield name[:-5], load_json(os.path.join(d, name))


def golden_set(env, tdir, templates, outdir, check, problems, extra=None):
    convs = list(conversations())
    for tname in templates:
        with open(os.path.join(tdir, tname), encoding="utf-8", newline="") as f:
            source = f.read()
        stem = tname[: -len(".jinja")]
        expected = set()
        for cname, conv in convs:
            suffix, text = result_text(lambda: render_conversation(env, source, conv, extra))
            path = os.path.join(outdir, stem, cname + suffix)
            expected.add(path)
            write_or_check(path, text, check, problems)
        tgt = os.path.join(outdir, stem)
        if not check and os.path.isdir(tgt):
            for f in os.listdir(tgt):
                p = os.path.join(tgt, f)
                if p not in expected:
                    os.remove(p)


def llamacpp_hashes(env, check, problems):
    """Every llama.cpp template x every conversation, stored as SHA-256 of the
    UTF-8 output (full texts would be several MB)."""
    names = sorted(t for t in os.listdir(LLAMACPP_TEMPLATES) if t.endswith(".jinja"))
    convs = list(conversations())
    out = {}
    for tname in names:
        with open(os.path.join(LLAMACPP_TEMPLATES, tname), encoding="utf-8", newline="") as f:
            source = f.read()
        res = {}
        for cname, conv in convs:
            suffix, text = result_text(
                lambda: render_conversation(env, source, conv, {"bos_token": "<s>", "eos_token": "</s>"}))
            if suffix == ".txt":
                res[cname] = {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "bytes": len(text.encode("utf-8"))}
            else:
                res[cname] = {"error": text.split(":", 1)[0]}
        out[tname] = res
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    write_or_check(os.path.join(HERE, "golden-llamacpp.json"), text, check, problems)


def calibration_prompts(env, check, problems):
    """The built-in calibration prompts (calib/prompts/data) rendered with the
    Qwen templates, as the calibration pipeline renders them: tools in file
    order, add_generation_prompt unless the last turn is the assistant's."""
    pdir = os.path.join(ROOT, "calib", "prompts", "data")
    if not os.path.isdir(pdir):
        return
    out = {}
    tdir = os.path.join(HERE, "templates")
    for tname in sorted(t for t in os.listdir(tdir) if t.endswith(".jinja")):
        with open(os.path.join(tdir, tname), encoding="utf-8", newline="") as f:
            source = f.read()
        res = {}
        for name in sorted(os.listdir(pdir)):
            if not name.endswith(".json"):
                continue
            p = load_json(os.path.join(pdir, name))
            conv = {"messages": p["messages"], "tools": p.get("tools") or None,
                    "add_generation_prompt": p["messages"][-1]["role"] != "assistant"}
            suffix, text = result_text(lambda: render_conversation(env, source, conv))
            if suffix == ".txt":
                res[p["id"]] = {"sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "bytes": len(text.encode("utf-8"))}
            else:
                res[p["id"]] = {"error": text.strip()}
        out[tname] = res
    text = json.dumps(out, indent=1, sort_keys=True) + "\n"
    write_or_check(os.path.join(HERE, "golden-prompts.json"), text, check, problems)


def conformance(env, check, problems):
    cases = load_json(os.path.join(HERE, "conformance", "cases.json"))
    names = [c["name"] for c in cases]
    if len(set(names)) != len(names):
        sys.exit("conformance/cases.json: duplicate case names")
    out = {}
    for case in cases:
        def run():
            return env.from_string(case["template"]).render(**case.get("vars", {}))

        suffix, text = result_text(run)
        if suffix == ".txt":
            out[case["name"]] = {"output": text}
        else:
            out[case["name"]] = {"error": text.split(":", 1)[0]}
    doc = {"jinja2": jinja2.__version__, "results": out}
    text = json.dumps(doc, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    write_or_check(os.path.join(HERE, "conformance", "expected.json"), text, check, problems)


SETS = ("golden", "llamacpp", "prompts", "conformance")


def main():
    args = sys.argv[1:]
    check = "--check" in args
    sets = [a for a in args if a != "--check"] or list(SETS)
    for a in sets:
        if a not in SETS:
            sys.exit(f"unknown set {a!r} (sets: {', '.join(SETS)})")
    env = make_env()
    problems = []
    tdir = os.path.join(HERE, "templates")
    if "golden" in sets:
        golden_set(env, tdir, sorted(t for t in os.listdir(tdir) if t.endswith(".jinja")),
                   os.path.join(HERE, "golden"), check, problems)
    if "llamacpp" in sets:
        if os.path.isdir(LLAMACPP_TEMPLATES):
            llamacpp_hashes(env, check, problems)
        else:
            print("note: llama.cpp templates not found at", LLAMACPP_TEMPLATES, "(run testdata/llamacpp/setup.sh)")
    if "prompts" in sets:
        calibration_prompts(env, check, problems)
    if "conformance" in sets:
        conformance(env, check, problems)
    if problems:
        for p in problems:
            print("differs:", os.path.relpath(p, ROOT))
        sys.exit(1)
    print("jinja2", jinja2.__version__, "-", ", ".join(sets), "verified" if check else "written")


if __name__ == "__main__":
    main()
