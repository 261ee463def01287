// Test-only bridge to llama.cpp (node-llama-cpp 3.21.1). Reads one JSON request from stdin,
// writes one JSON response to stdout. Used by Go tests as an independent reference.
//
// Requests:
//   {"op":"tokenize","model":"x.gguf","texts":["..."],"special":true}
//       -> {"tokens":[[...],...]}
//   {"op":"detokenize","model":"x.gguf","tokens":[[...]]}  -> {"texts":[...]}
//   {"op":"probs","model":"x.gguf","tokens":[...],"positions":[i,...],"topk":N,"threads":1,"ctx":512}
//       -> {"probs":[{"pos":i,"top":[[token,p],...]}, ...]}  next-token distribution after
//          tokens[0..i] (all tokens when topk is 0)
//   {"op":"greedy","model":"x.gguf","tokens":[...],"n":64,"threads":1,"ctx":512} -> {"tokens":[...]}
//   {"op":"info","model":"x.gguf"} -> {"vocab":n, "train_ctx":n}
//   {"op":"bench","model":"x.gguf","prompt":N,"gen":M,"threads":T,"ctx":512} -> {"prompt_ms":x,"gen_ms":y}
//          wall time of one N-token prompt batch and of M single-token greedy decode steps
//   {"op":"logprobs","model":"x.gguf","sequences":[[...],...],"vocab":n,"threads":1,"ctx":256,"kvType":"F32"}
//       -> {"vocab":n,"sequences":["base64",...]}  for every position i of every sequence
//          (each evaluated from an empty context), the natural log of llama.cpp's next-token
//          probability of every vocabulary id after tokens[0..i]: little-endian float64,
//          position-major (len(seq) x vocab), -Infinity where the float32 probability is 0.
//          The probabilities are those of the "probs" op (temperature 1, no truncation);
//          vocab defaults to the number of probabilities at the first position; ctx must
//          exceed the longest sequence (a full context is shifted before its last token). kvType (any
//          request; default: node-llama-cpp's F16) sets the KV cache type of the context.
//   {"op":"batch","threads":1,"requests":[req,...]} -> {"results":[resp,...]}  several requests in
//          one process (saves the ~2 s start-up per request); each result is the response of
//          the request at the same index.
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const readStdin = async () => {
  const chunks = [];
  for await (const c of process.stdin) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
};

const main = async () => {
  const req = await readStdin();
  const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error, maxThreads: req.threads || 1 });
  let out;
  if (req.op === "batch") {
    const results = [];
    for (const r of req.requests) results.push(await handle(llama, r));
    out = { results };
  } else {
    out = await handle(llama, req);
  }
  process.stdout.write(JSON.stringify(out));
  await llama.dispose();
};

const handle = async (llama, req) => {
  const vocabOnly = req.op === "tokenize" || req.op === "detokenize";
  const model = await llama.loadModel({ modelPath: req.model, gpuLayers: 0, vocabOnly });
  let out;
  if (req.op === "tokenize") {
    out = { tokens: req.texts.map((t) => Array.from(model.tokenize(t, req.special !== false))) };
  } else if (req.op === "detokenize") {
    out = { texts: req.tokens.map((t) => model.detokenize(t, req.special !== false)) };
  } else if (req.op === "info") {
    out = { vocab: model.tokens.bos === undefined ? null : null, train_ctx: model.trainContextSize };
  } else {
    const kv = req.kvType ? { experimentalKvCacheKeyType: req.kvType, experimentalKvCacheValueType: req.kvType } : {};
    const ctx = await model.createContext({ contextSize: req.ctx || 512, threads: req.threads || 1, batchSize: req.ctx || 512, flashAttention: false, ...kv });
    const seq = ctx.getSequence();
    if (req.op === "probs") {
      const want = new Set(req.positions ?? [req.tokens.length - 1]);
      const input = req.tokens.map((t, i) => (want.has(i) ? [t, { generateNext: { probabilities: true, options: { temperature: 1, topK: 0, topP: 1, minP: 0 } } }] : t));
      const res = await seq.controlledEvaluate(input);
      const probs = [];
      for (let i = 0; i < req.tokens.length; i++) {
        if (!want.has(i) || !res[i]) continue;
        let top = Array.from(res[i].next.probabilities.entries());
        if (req.topk) top = top.slice(0, req.topk);
        probs.push({ pos: i, top });
      }
      out = { probs };
    } else if (req.op === "logprobs") {
      let vocab = req.vocab || 0;
      const seqs = [];
      for (const toks of req.sequences) {
        // a context filled exactly is shifted before its last token: keep one slot free
        if (toks.length >= (req.ctx || 512)) throw new Error(`sequence of ${toks.length} tokens needs ctx > ${toks.length}, got ${req.ctx || 512}`);
        await seq.clearHistory();
        const input = toks.map((t) => [t, { generateNext: { probabilities: true, options: { temperature: 1, topK: 0, topP: 1, minP: 0 } } }]);
        const res = await seq.controlledEvaluate(input);
        if (!vocab) vocab = res[0].next.probabilities.size;
        const lp = new Float64Array(toks.length * vocab).fill(-Infinity);
        for (let i = 0; i < toks.length; i++) {
          if (!res[i]) throw new Error(`no output at position ${i}`);
          if (res[i].next.probabilities.size > vocab) throw new Error(`position ${i}: ${res[i].next.probabilities.size} probabilities > vocab ${vocab}`);
          for (const [tok, p] of res[i].next.probabilities) {
            if (tok < 0 || tok >= vocab) throw new Error(`token ${tok} outside the vocabulary ${vocab}`);
            lp[i * vocab + tok] = Math.log(p);
          }
        }
        seqs.push(Buffer.from(lp.buffer).toString("base64"));
      }
      out = { vocab, sequences: seqs };
    } else if (req.op === "greedy") {
      const gen = [];
      let input = req.tokens.slice();
      for (let k = 0; k < req.n; k++) {
        const last = input.length - 1;
        const items = input.map((t, i) => (i === last ? [t, { generateNext: { token: true, options: { temperature: 0 } } }] : t));
        const res = await seq.controlledEvaluate(items);
        const tok = res[last].next.token;
        gen.push(tok);
        input = [tok];
      }
      out = { tokens: gen };
    } else if (req.op === "bench") {
      const prompt = [];
      for (let i = 0; i < req.prompt; i++) prompt.push((i * 7919 + 13) % 256);
      const items = prompt.map((t, i) => (i === prompt.length - 1 ? [t, { generateNext: { token: true, options: { temperature: 0 } } }] : t));
      let t0 = performance.now();
      let res = await seq.controlledEvaluate(items);
      const promptMs = performance.now() - t0;
      let tok = res[prompt.length - 1].next.token;
      t0 = performance.now();
      for (let k = 0; k < req.gen; k++) {
        res = await seq.controlledEvaluate([[tok, { generateNext: { token: true, options: { temperature: 0 } } }]]);
        tok = res[0].next.token;
      }
      out = { prompt_ms: promptMs, gen_ms: performance.now() - t0 };
    } else {
      throw new Error("unknown op " + req.op);
    }
    await ctx.dispose();
  }
  await model.dispose();
  return out;
};
main().catch((e) => { process.stderr.write(String(e && e.stack || e) + "\n"); process.exit(1); });
