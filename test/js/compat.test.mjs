// Drives a running dflash server with the official ollama and openai clients.
//   DFLASH_URL          server base URL (required), e.g. http://127.0.0.1:11434
//   DFLASH_MODEL        model to use (default "fake:latest", the fake backend's)
//   DFLASH_EXPECT_TEXT  the exact unconstrained answer when known (the fake's); unset for real
//                       models, where the tests only require some text
//   DFLASH_PULL_MODEL   a Hugging Face id the server can pull (from a fake hub); the pull test
//                       is skipped without it
//   DFLASH_TOOLS_MODEL  a model with tools and thinking that follows the fake's script (the fake
//                       backend's "fake-tools:latest"); the tool and thinking tests skip without it
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Ollama } from 'ollama';
import OpenAI from 'openai';

const url = process.env.DFLASH_URL;
if (!url) throw new Error('set DFLASH_URL to the server under test');
const model = process.env.DFLASH_MODEL || 'fake:latest';
const expected = process.env.DFLASH_EXPECT_TEXT;

const ollama = new Ollama({ host: url });
const openai = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'unused', maxRetries: 0 });

// An unconstrained answer ends with 'stop'; a sampled real model may instead fill its context
// first, so without an expected text 'length' is accepted too.
function checkEnded(reason) {
  if (expected !== undefined) assert.equal(reason, 'stop');
  else assert.ok(reason === 'stop' || reason === 'length', `finish reason ${reason}`);
}

function checkText(text) {
  assert.equal(typeof text, 'string');
  if (expected !== undefined) assert.equal(text, expected);
  else assert.ok(text.length > 0, 'expected some generated text');
}

test('root answers like ollama', async () => {
  const res = await fetch(url + '/');
  assert.equal(res.status, 200);
  assert.equal(await res.text(), 'dflash is running');
});

test('ollama: list, show, ps', async () => {
  const { models } = await ollama.list();
  assert.ok(models.some((m) => m.name === model), `${model} in ${JSON.stringify(models)}`);
  const show = await ollama.show({ model });
  assert.ok(show.details.family.length > 0);
  const ps = await ollama.ps();
  assert.ok(Array.isArray(ps.models));
});

test('ollama: generate, not streamed', async () => {
  const r = await ollama.generate({ model, prompt: 'Why is the sky blue?', stream: false });
  checkText(r.response);
  assert.equal(r.done, true);
  checkEnded(r.done_reason);
  assert.ok(r.eval_count > 0 && r.prompt_eval_count > 0 && r.total_duration > 0);
});

test('ollama: generate, streamed, with num_predict', async () => {
  const parts = [];
  for await (const p of await ollama.generate({ model, prompt: 'Count', stream: true, options: { num_predict: 3, temperature: 0 } })) {
    parts.push(p);
  }
  const last = parts.at(-1);
  assert.equal(last.done, true);
  assert.equal(last.done_reason, 'length');
  assert.equal(last.eval_count, 3);
  assert.ok(parts.slice(0, -1).every((p) => p.done === false));
});

test('ollama: chat, streamed and not', async () => {
  const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello!' }];
  const r = await ollama.chat({ model, messages, stream: false });
  assert.equal(r.message.role, 'assistant');
  checkText(r.message.content);

  let text = '';
  let final;
  for await (const p of await ollama.chat({ model, messages, stream: true })) {
    text += p.message.content;
    if (p.done) final = p;
  }
  checkText(text);
  assert.ok(final && final.eval_count > 0);
});

test('ollama: errors', async () => {
  await assert.rejects(ollama.generate({ model: 'no-such-model', prompt: 'x', stream: false }),
    (e) => e.status_code === 404 && /not found/.test(e.error));
  await assert.rejects(ollama.chat({ model, messages: [{ role: 'user', content: 'x' }], options: { top_p: 7 }, stream: false }),
    (e) => e.status_code === 400 && /options\.top_p/.test(e.error));
  await assert.rejects(ollama.generate({ model, prompt: 'x', format: 'yaml', stream: false }),
    (e) => e.status_code === 400 && /format/.test(e.error));
});

test('openai: models', async () => {
  const page = await openai.models.list();
  assert.ok(page.data.some((m) => m.id === model));
  const m = await openai.models.retrieve(model);
  assert.equal(m.id, model);
});

test('openai: chat completion, not streamed', async () => {
  const c = await openai.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hello!' }], temperature: 0, seed: 1,
  });
  assert.equal(c.object, 'chat.completion');
  assert.equal(c.choices.length, 1);
  assert.equal(c.choices[0].message.role, 'assistant');
  checkEnded(c.choices[0].finish_reason);
  checkText(c.choices[0].message.content);
  assert.equal(c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens);
});

test('openai: chat completion, streamed with usage', async () => {
  const stream = await openai.chat.completions.create({
    model, messages: [{ role: 'user', content: 'Hello!' }], stream: true, stream_options: { include_usage: true },
  });
  let text = '';
  let finish;
  let usage;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      text += ch.delta.content ?? '';
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  checkText(text);
  checkEnded(finish);
  assert.ok(usage && usage.completion_tokens > 0);
});

test('openai: completions, streamed and not, with a length limit', async () => {
  const c = await openai.completions.create({ model, prompt: 'Once upon a time', max_tokens: 2 });
  assert.equal(c.object, 'text_completion');
  assert.equal(c.choices[0].finish_reason, 'length');
  assert.equal(c.usage.completion_tokens, 2);

  const stream = await openai.completions.create({ model, prompt: 'Once upon a time', max_tokens: 200, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.text ?? '';
  checkText(text);
});

test('openai: errors', async () => {
  await assert.rejects(openai.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  await assert.rejects(openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], n: 2 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'n');
  await assert.rejects(openai.chat.completions.create({ model, messages: [{ role: 'user', content: 'x' }], temperature: 3 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature' && e.type === 'invalid_request_error');
  await assert.rejects(openai.completions.create({ model, prompt: 'x', max_tokens: 0 }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
});

function norm(v) {
  return Math.sqrt(v.reduce((s, x) => s + x * x, 0));
}

// Greedy answers with two alternatives per token: one entry per generated token, the chosen token
// the likeliest (repeat_penalty 1, so greedy picks the raw distribution's mode).
function checkLogprobs(lps, count) {
  assert.equal(lps.length, count);
  for (const lp of lps) {
    assert.ok(lp.logprob <= 0, `logprob ${lp.logprob}`);
    assert.equal(lp.top_logprobs.length, 2);
    assert.ok(lp.top_logprobs[0].logprob >= lp.top_logprobs[1].logprob);
    assert.equal(lp.top_logprobs[0].logprob, lp.logprob);
  }
}

test('ollama: logprobs, streamed and not', async () => {
  const req = { model, prompt: 'Once upon a time', logprobs: true, top_logprobs: 2, options: { temperature: 0, repeat_penalty: 1, num_predict: 6 } };
  const r = await ollama.generate({ ...req, stream: false });
  checkLogprobs(r.logprobs, r.eval_count);
  const lps = [];
  let count = 0;
  for await (const p of await ollama.chat({ model, messages: [{ role: 'user', content: 'Hello!' }], ...req, prompt: undefined, stream: true })) {
    lps.push(...(p.logprobs ?? []));
    if (p.done) count = p.eval_count;
  }
  checkLogprobs(lps, count);
});

test('ollama: embed, a batch and one input', async () => {
  const r = await ollama.embed({ model, input: ['Once upon a time', 'there was a cat'] });
  assert.equal(r.embeddings.length, 2);
  for (const e of r.embeddings) assert.ok(Math.abs(norm(e) - 1) < 1e-5, `norm ${norm(e)}`);
  const one = await ollama.embed({ model, input: 'there was a cat' });
  assert.deepEqual(one.embeddings[0], r.embeddings[1]);
  const old = await ollama.embeddings({ model, prompt: 'there was a cat' });
  assert.equal(old.embedding.length, one.embeddings[0].length);
});

test('openai: chat logprobs, streamed and not', async () => {
  const req = { model, messages: [{ role: 'user', content: 'Hello!' }], temperature: 0, max_tokens: 6, logprobs: true, top_logprobs: 2 };
  const c = await openai.chat.completions.create(req);
  checkLogprobs(c.choices[0].logprobs.content, c.usage.completion_tokens);
  const lps = [];
  for await (const chunk of await openai.chat.completions.create({ ...req, stream: true })) {
    for (const ch of chunk.choices) lps.push(...(ch.logprobs?.content ?? []));
  }
  assert.deepEqual(lps, c.choices[0].logprobs.content);
  const t = await openai.completions.create({ model, prompt: 'Once upon a time', temperature: 0, max_tokens: 4, logprobs: 2 });
  assert.equal(t.choices[0].logprobs.tokens.length, t.usage.completion_tokens);
});

test('openai: embeddings (the client asks for base64 and decodes it)', async () => {
  const r = await openai.embeddings.create({ model, input: ['Once upon a time', 'there was a cat'] });
  assert.equal(r.data.length, 2);
  for (const d of r.data) assert.ok(Math.abs(norm(d.embedding) - 1) < 1e-5, `norm ${norm(d.embedding)}`);
  const f = await openai.embeddings.create({ model, input: 'there was a cat', encoding_format: 'float' });
  // JSON carries the float32s in their shortest decimal form: rounded back to float32 they are
  // the base64 answer's values exactly.
  assert.deepEqual(f.data[0].embedding.map(Math.fround), r.data[1].embedding);
  assert.ok(r.usage.prompt_tokens > 0);
  await assert.rejects(openai.embeddings.create({ model, input: '' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'input');
});

const pullModel = process.env.DFLASH_PULL_MODEL;

test('ollama: pull with progress, then use the model', { skip: !pullModel && 'DFLASH_PULL_MODEL unset' }, async () => {
  const statuses = [];
  const completed = new Set();
  for await (const p of await ollama.pull({ model: pullModel, stream: true })) {
    statuses.push(p.status);
    if (p.total > 0 && p.completed === p.total) completed.add(p.digest);
  }
  assert.equal(statuses[0], 'pulling manifest');
  assert.equal(statuses.at(-1), 'success');
  assert.ok(completed.has('config.json') && completed.has('model.safetensors'), `completed ${[...completed]}`);
  const { models } = await ollama.list();
  assert.ok(models.some((m) => m.name === `${pullModel}:latest`), JSON.stringify(models.map((m) => m.name)));
  const r = await ollama.generate({ model: pullModel, prompt: 'once upon a time', stream: false, options: { num_predict: 8 } });
  assert.equal(r.done, true);
  const once = await ollama.pull({ model: pullModel, stream: false });
  assert.equal(once.status, 'success');
});

// Tools and thinking, through both clients, against the fake's script (server/fake): with
// thinking on it thinks "Thinking about it.", then, offered tools and given no tool result yet,
// it calls get_weather({"city":"Paris"}); with a result it answers the expected text.
const toolsModel = process.env.DFLASH_TOOLS_MODEL;
const skipTools = !toolsModel && 'DFLASH_TOOLS_MODEL unset';
const weather = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
};
const question = [{ role: 'user', content: 'What is the weather in Paris?' }];

test('ollama: a model without thinking refuses think', async () => {
  await assert.rejects(ollama.chat({ model, messages: question, think: true, stream: false }),
    (e) => e.status_code === 400 && /does not support thinking/.test(e.error));
});

test('ollama: tools and thinking, not streamed, then the tool result', { skip: skipTools }, async () => {
  const r = await ollama.chat({ model: toolsModel, messages: question, tools: [weather], stream: false });
  assert.equal(r.message.thinking, 'Thinking about it.');
  assert.equal(r.message.content, '');
  assert.equal(r.message.tool_calls.length, 1);
  const call = r.message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(call.function.arguments, { city: 'Paris' });

  const messages = [...question, r.message, { role: 'tool', content: '18C and sunny', tool_name: 'get_weather' }];
  const answer = await ollama.chat({ model: toolsModel, messages, tools: [weather], think: false, stream: false });
  assert.equal(answer.message.content, expected);
  assert.equal(answer.message.thinking, undefined);
  assert.equal(answer.message.tool_calls, undefined);
});

test('ollama: tools and thinking, streamed', { skip: skipTools }, async () => {
  let thinking = '';
  const calls = [];
  let sawCallBeforeThinkingEnded = false;
  for await (const p of await ollama.chat({ model: toolsModel, messages: question, tools: [weather], think: 'high', stream: true })) {
    if (p.message.thinking) {
      if (calls.length > 0) sawCallBeforeThinkingEnded = true;
      thinking += p.message.thinking;
    }
    calls.push(...(p.message.tool_calls ?? []));
    assert.equal(p.message.content, '');
  }
  assert.equal(thinking, 'Thinking about it.');
  assert.ok(!sawCallBeforeThinkingEnded, 'thinking streams before the call');
  assert.deepEqual(calls.map((c) => [c.function.name, c.function.arguments]), [['get_weather', { city: 'Paris' }]]);
});

test('ollama: generate with think', { skip: skipTools }, async () => {
  const r = await ollama.generate({ model: toolsModel, prompt: 'Why is the sky blue?', think: true, stream: false });
  assert.equal(r.thinking, 'Thinking about it.');
  assert.equal(r.response, expected);
});

test('openai: tool call and reasoning, not streamed', { skip: skipTools }, async () => {
  const c = await openai.chat.completions.create({ model: toolsModel, messages: question, tools: [weather], tool_choice: 'auto' });
  const ch = c.choices[0];
  assert.equal(ch.finish_reason, 'tool_calls');
  assert.equal(ch.message.reasoning_content, 'Thinking about it.');
  assert.equal(ch.message.tool_calls.length, 1);
  const call = ch.message.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });

  const messages = [...question, ch.message, { role: 'tool', tool_call_id: call.id, content: '18C and sunny' }];
  const answer = await openai.chat.completions.create({ model: toolsModel, messages, tools: [weather], reasoning_effort: 'none' });
  assert.equal(answer.choices[0].message.content, expected);
  assert.equal(answer.choices[0].finish_reason, 'stop');
});

test('openai: tool call streamed, put together by the client', { skip: skipTools }, async () => {
  // The client's own stream helper accumulates the tool call deltas: it sees the call only if
  // they come as OpenAI sends them (index, id, type and name first, then argument fragments).
  const stream = openai.chat.completions.stream({ model: toolsModel, messages: question, tools: [weather] });
  let reasoning = '';
  stream.on('chunk', (chunk) => { reasoning += chunk.choices[0]?.delta?.reasoning_content ?? ''; });
  const final = await stream.finalChatCompletion();
  const ch = final.choices[0];
  assert.equal(reasoning, 'Thinking about it.');
  assert.equal(ch.finish_reason, 'tool_calls');
  assert.equal(ch.message.tool_calls.length, 1);
  assert.equal(ch.message.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(ch.message.tool_calls[0].function.arguments), { city: 'Paris' });
});

test('openai: runTools calls the function and gets the answer', { skip: skipTools }, async () => {
  const seen = [];
  const runner = openai.chat.completions.runTools({
    model: toolsModel, messages: question,
    tools: [{
      type: 'function',
      function: {
        name: 'get_weather', parameters: weather.function.parameters, parse: JSON.parse,
        function: (args) => { seen.push(args); return '18C and sunny'; },
      },
    }],
  });
  assert.equal(await runner.finalContent(), expected);
  assert.deepEqual(seen, [{ city: 'Paris' }]);
});

// Structured output: whatever the model (the fake writes the grammar's completion, a real tiny
// model writes junk under the grammar), the text parses and has the schema's shape. A short
// budget is enough: the grammar steers the last tokens to a completion.
const person = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 10 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    pets: { type: 'array', items: { enum: ['cat', 'dog'] }, maxItems: 2 },
  },
  required: ['name', 'age', 'pets'],
  additionalProperties: false,
};

function checkPerson(text) {
  const v = JSON.parse(text);
  assert.deepEqual(Object.keys(v).sort(), ['age', 'name', 'pets']);
  assert.equal(typeof v.name, 'string');
  assert.ok(v.name.length <= 10);
  assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 120, `age ${v.age}`);
  assert.ok(Array.isArray(v.pets) && v.pets.length <= 2 && v.pets.every((p) => p === 'cat' || p === 'dog'));
}

test('ollama: format json and a schema, streamed and not', async () => {
  const r = await ollama.generate({ model, prompt: 'Answer in JSON.', format: 'json', stream: false, options: { num_predict: 48, seed: 1 } });
  JSON.parse(r.response);
  const c = await ollama.chat({ model, messages: [{ role: 'user', content: 'Who?' }], format: person, stream: false, options: { num_predict: 64, temperature: 1, seed: 2 } });
  checkPerson(c.message.content);
  let text = '';
  for await (const p of await ollama.chat({ model, messages: [{ role: 'user', content: 'Who?' }], format: person, stream: true, options: { num_predict: 64, temperature: 0 } })) {
    text += p.message.content;
  }
  checkPerson(text);
});

test('ollama: an unsupported schema keyword is a 400 naming it', async () => {
  await assert.rejects(
    ollama.generate({ model, prompt: 'x', format: { type: 'integer', multipleOf: 3 }, stream: false }),
    (e) => e.status_code === 400 && /format\.multipleOf/.test(e.error),
  );
});

test('openai: response_format json_schema and json_object, streamed and not', async () => {
  const messages = [{ role: 'user', content: 'Who?' }];
  const response_format = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: person } };
  const r = await openai.chat.completions.create({ model, messages, response_format, max_tokens: 64, seed: 3 });
  checkPerson(r.choices[0].message.content);
  const stream = await openai.chat.completions.create({ model, messages, response_format, max_tokens: 64, temperature: 1, seed: 4, stream: true });
  let text = '';
  for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
  checkPerson(text);
  const o = await openai.chat.completions.create({ model, messages, response_format: { type: 'json_object' }, max_tokens: 48 });
  const v = JSON.parse(o.choices[0].message.content);
  assert.equal(typeof v, 'object');
  assert.ok(v !== null && !Array.isArray(v));
});
