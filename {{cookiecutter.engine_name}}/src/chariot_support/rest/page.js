'use strict';
// The engine's page: learns which model the engine serves, sends the pictures it is given as the chariot-v2-kserve
// request the engine documents, and draws the answer on each picture as the engine's own client draws it
// (client/drawing.py: the same marks, captions and colours).
(() => {
  const $ = (id) => document.getElementById(id);
  const TASKS = JSON.parse($('tasks').textContent);
  // Every URL is relative to the page, so it works at the engine's root and under a gateway's path prefix, opened
  // with or without its trailing slash.
  const BASE = new URL(location.pathname.endsWith('/') ? location.pathname : `${location.pathname}/`, location.origin);

  // --- drawing: what client/drawing.py does, on a canvas --------------------------------------------------------
  // Its colours, RGB here (BGR there): labels that name a colour are drawn in it, others get one by CRC-32.
  const PALETTE = [[255, 215, 0], [255, 0, 255], [0, 255, 255], [255, 140, 0], [255, 255, 255], [255, 105, 180],
    [191, 255, 0], [30, 144, 255]];
  const NAMED = {
    red: [255, 0, 0], green: [0, 255, 0], blue: [0, 0, 255], yellow: [255, 255, 0], cyan: [0, 255, 255],
    magenta: [255, 0, 255], orange: [255, 165, 0], purple: [128, 0, 128], white: [255, 255, 255], black: [0, 0, 0],
    grey: [128, 128, 128], gray: [128, 128, 128],
  };
  const CRC_TABLE = Uint32Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  function crc32(text) {
    let c = 0xffffffff;
    for (const byte of new TextEncoder().encode(text)) c = CRC_TABLE[(c ^ byte) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  }
  const colourOf = (label) => NAMED[label.trim().toLowerCase()] || PALETTE[crc32(label) % PALETTE.length];
  const rgba = ([r, g, b], alpha = 1) => `rgba(${r},${g},${b},${alpha})`;
  // Python's round(), halves to even, so that both sides size lines and write scores alike.
  function halfEven(x) {
    const floor = Math.floor(x);
    const rest = x - floor;
    if (rest !== 0.5) return rest > 0.5 ? floor + 1 : floor;
    return floor % 2 === 0 ? floor : floor + 1;
  }
  // A score as Python's f"{score:.2f}" writes it. toFixed rounds the exact value as Python does, but sends exact
  // halves up; the only numbers exactly halfway at two places are odd eighths (0.125, 0.375...).
  function twoPlaces(x) {
    const eighths = x * 8;
    if (Number.isInteger(eighths) && eighths % 2 !== 0) return (halfEven(x * 100) / 100).toFixed(2);
    return x.toFixed(2);
  }
  function orientedCorners(box, width, height) {
    const cx = box.cx * width, cy = box.cy * height, hw = (box.w * width) / 2, hh = (box.h * height) / 2;
    const cos = Math.cos(box.r), sin = Math.sin(box.r); // r turns clockwise on screen, y pointing down
    return [[-hw, -hh], [hw, -hh], [hw, hh], [-hw, hh]].map(([dx, dy]) => [cx + dx * cos - dy * sin, cy + dx * sin + dy * cos]);
  }
  const has = (result, keys) => keys.every((key) => key in result);
  // client/drawing.py's marks(): each result outlined on the picture, or written below it.
  function marksOf(results, width, height) {
    const marks = [];
    for (const result of results) {
      const label = String(result.label ?? '');
      const colour = colourOf(label);
      const caption = 'score' in result ? `${label} ${twoPlaces(result.score)}` : label;
      const mark = { caption, colour, label, score: result.score, result };
      if (has(result, ['xmin', 'ymin', 'xmax', 'ymax'])) {
        const { xmin, ymin, xmax, ymax } = result;
        marks.push({ ...mark, kind: 'box', outlines: [[[xmin, ymin], [xmax, ymin], [xmax, ymax], [xmin, ymax]]] });
      } else if (has(result, ['cx', 'cy', 'w', 'h', 'r'])) {
        marks.push({ ...mark, kind: 'oriented', outlines: [orientedCorners(result, width, height)] });
      } else if ('contour' in result) {
        const outlines = result.contour.filter((c) => c.length).map((c) => c.map((p) => [p.x, p.y]));
        marks.push({ ...mark, kind: 'region', outlines });
      } else if ('answer' in result) {
        marks.push({ ...mark, kind: 'answer', caption: String(result.answer), prompt: result.prompt || '', outlines: [] });
      } else if (label) {
        marks.push({ ...mark, kind: 'label', outlines: [] });
      }
    }
    return marks;
  }
  function caption(ctx, text, [x0, y0], colour, font, width) {
    ctx.font = `${font}px sans-serif`;
    const textWidth = ctx.measureText(text).width;
    const x = Math.min(Math.max(x0, 0), Math.max(width - textWidth - 4, 0));
    const y = Math.max(y0, font + 4); // kept inside the picture, as the client does
    ctx.fillStyle = rgba(colour);
    ctx.fillRect(x, y - font - 4, textWidth + 4, font + 4);
    const [r, g, b] = colour; // dark text on a light label, light on a dark one
    ctx.fillStyle = 0.299 * r + 0.587 * g + 0.114 * b > 110 ? '#000' : '#fff';
    ctx.textBaseline = 'middle';
    ctx.fillText(text, x + 2, y - (font + 4) / 2);
  }
  function drawMarks(ctx, marks, width, height) {
    const side = Math.min(width, height);
    const thickness = Math.max(2, halfEven(side / 240));
    const font = Math.round(30 * Math.max(0.4, side / 600));
    for (const mark of marks) {
      if (!mark.outlines.length) continue;
      const path = new Path2D();
      for (const outline of mark.outlines) {
        path.moveTo(...outline[0]);
        for (const point of outline.slice(1)) path.lineTo(...point);
        path.closePath();
      }
      if (mark.kind === 'region') {
        // A lighter tint, so a region stays visible when its colour is the label's own ("red" on red).
        ctx.fillStyle = rgba(mark.colour.map((c) => (c + 255) >> 1), 0.35);
        ctx.fill(path, 'evenodd');
      }
      ctx.lineJoin = mark.kind === 'box' ? 'miter' : 'round';
      ctx.strokeStyle = '#000'; // a dark edge, so a box in its label's colour shows on a shape of that colour
      ctx.lineWidth = thickness + 2;
      ctx.stroke(path);
      ctx.strokeStyle = rgba(mark.colour);
      ctx.lineWidth = thickness;
      ctx.stroke(path);
      const points = mark.outlines.flat();
      const anchor = mark.kind === 'box' ? points[0] : points.reduce((top, p) => (p[1] < top[1] ? p : top));
      caption(ctx, mark.caption, anchor, mark.colour, font, width);
    }
  }

  // --- the page's parts ----------------------------------------------------------------------------------------
  const state = { model: null, slug: null, task: null, pictures: [], sent: 0 };
  function element(tag, properties = {}, ...children) {
    const node = Object.assign(document.createElement(tag), properties);
    node.append(...children);
    return node;
  }
  function labelled(node, label) {
    node.setAttribute('aria-label', label);
    return node;
  }
  function status(text, bad = false) {
    $('status').textContent = text;
    $('status').classList.toggle('bad', bad);
  }
  async function fetchJSON(path, init) {
    const response = await fetch(new URL(path, BASE), init);
    const text = await response.text();
    let body = null;
    try { body = JSON.parse(text); } catch { /* not JSON: said below */ }
    if (!response.ok) throw new Error(`${response.status} ${body && body.error ? body.error : response.statusText}`);
    if (body === null) throw new Error(`${path} did not answer JSON`);
    return body;
  }

  // The model's name and task type come from the engine: its repository index, then the model's metadata, whose
  // platform is chariot-v2-kserve_<task>.
  async function discover(tries = 0) {
    try {
      const index = await fetchJSON('v2/repository/index', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: '{}' });
      const model = index.find((m) => m.state === 'READY') || index[0];
      if (!model) throw new Error('the engine lists no model');
      const metadata = await fetchJSON(`v2/models/${encodeURIComponent(model.name)}`);
      const platform = String(metadata.platform || '');
      const slug = platform.slice(platform.indexOf('_') + 1);
      if (!TASKS[slug]) throw new Error(`its platform, ${platform || 'none'}, names no Chariot task type this page draws`);
      if (state.model !== model.name) setModel(model.name, slug);
      if (model.state === 'READY') {
        status(`${TASKS[slug].name} · ready`);
      } else {
        status(`${TASKS[slug].name} · ${model.state.toLowerCase()}…`);
        setTimeout(discover, 1000, tries + 1);
      }
    } catch (error) {
      status(`Could not learn which model the engine serves: ${error.message}`, true);
      if (tries < 100) setTimeout(discover, 2000, tries + 1);
    }
  }
  function setModel(name, slug) {
    const task = TASKS[slug];
    Object.assign(state, { model: name, slug, task });
    $('model').textContent = name;
    document.title = `Try ${name} · ${task.name}`;
    $('action').replaceChildren(...task.actions.map((action) => element('option', { value: action, textContent: action })));
    $('action-field').hidden = task.actions.length < 2;
    $('threshold-field').hidden = slug === 'image_text_to_text';
    $('prompts-field').hidden = slug !== 'image_text_to_text';
    $('send').disabled = !state.pictures.length;
    if (state.pictures.length && !state.sent) send(); // given before the engine said which model it serves
  }

  function addMetadataRow(key = '', type = 'str', value = '') {
    const body = $('metadata-rows').tBodies[0];
    const n = body.rows.length + 1;
    const row = element('tr');
    const keyInput = labelled(element('input', { className: 'key', value: key }), `metadata row ${n}: key`);
    const typeSelect = labelled(element('select', { className: 'type' },
      ...['str', 'int', 'float', 'dict'].map((t) => element('option', { value: t, textContent: t, selected: t === type }))),
    `metadata row ${n}: type`);
    const valueInput = labelled(element('input', { className: 'value', value }), `metadata row ${n}: value`);
    const remove = labelled(element('button', { type: 'button', textContent: '×', title: 'Remove this row' }),
      `remove metadata row ${n}`);
    remove.addEventListener('click', () => {
      row.remove();
      $('metadata-rows').hidden = !body.rows.length;
      $('add-metadata').focus();
    });
    row.append(...[keyInput, typeSelect, valueInput, remove].map((control) => element('td', {}, control)));
    body.append(row);
    $('metadata-rows').hidden = false;
    keyInput.focus();
  }
  function metadata() {
    const rows = [...$('metadata-rows').tBodies[0].rows].map((row) => ({
      key: row.querySelector('.key').value.trim(),
      type: row.querySelector('.type').value,
      value: row.querySelector('.value').value,
    }));
    const extended = rows.filter((row) => row.key);
    return extended.length ? JSON.stringify({ standard_metadata: {}, extended_metadata: extended }) : null;
  }
  function parameters() {
    const found = {};
    if (state.task.actions.length > 1) found.action = $('action').value;
    const threshold = $('threshold').value.trim();
    if (!$('threshold-field').hidden && threshold) {
      const number = Number(threshold);
      found.score_threshold = Number.isFinite(number) ? number : threshold; // not a number: the engine says why
    }
    if (!$('prompts-field').hidden) {
      const prompts = $('prompts').value.split('\n').map((p) => p.trim()).filter(Boolean);
      if (prompts.length) found.prompts = prompts;
    }
    return found;
  }
  function base64Of(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve(reader.result.slice(reader.result.indexOf(',') + 1));
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }
  // The request as the engine README documents it: one BYTES input of shape [1] per picture, holding the base64 of
  // its file, with the parameters on each input and the metadata on the request.
  async function requestFor(pictures) {
    const shared = parameters();
    const data = await Promise.all(pictures.map((picture) => base64Of(picture.file)));
    const body = {
      inputs: pictures.map((picture, i) => ({
        name: `image-${i}`, shape: [1], datatype: 'BYTES', data: [data[i]],
        ...(Object.keys(shared).length ? { parameters: { ...shared } } : {}),
      })),
    };
    const passed = metadata();
    if (passed !== null) body.parameters = { metadata: passed };
    return body;
  }

  function take(files) {
    const pictures = [...files].map((file, i) => ({ file, name: file.name || `picture-${i + 1}.png` }));
    if (!pictures.length) return;
    state.pictures = pictures;
    send();
  }
  async function send() {
    if (!state.model || !state.pictures.length) return;
    const ticket = ++state.sent; // a later request's answer replaces an earlier one's
    const pictures = state.pictures;
    $('send').disabled = true;
    $('empty').hidden = true;
    status(`${state.task.name} · sending ${pictures.length} picture${pictures.length === 1 ? '' : 's'}…`);
    try {
      const body = await requestFor(pictures);
      const url = new URL(`v2/models/${encodeURIComponent(state.model)}/infer/`, BASE);
      const started = performance.now();
      const response = await fetch(url, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
      const text = await response.text();
      const elapsed = performance.now() - started;
      if (ticket === state.sent) await show(pictures, url, body, response, text, elapsed);
    } catch (error) {
      if (ticket === state.sent) showError(`The engine could not be reached: ${error.message}`);
    } finally {
      if (ticket === state.sent) $('send').disabled = false;
    }
  }

  // --- the answer ------------------------------------------------------------------------------------------------
  const ms = (value) => `${value < 10 ? value.toFixed(1) : Math.round(value).toLocaleString('en')} ms`;
  function showError(message, answered = '') {
    const box = $('error');
    box.replaceChildren(
      element('p', {}, element('strong', { textContent: answered ? `The engine answered ${answered}: ` : '' }), message));
    box.hidden = false;
    status(`${state.task.name} · the last request failed`, true);
  }
  // The W3C Server-Timing header: `name;dur=12.3;desc="..."`, comma-separated; a quoted value may hold commas.
  function parseServerTiming(header) {
    const metrics = [];
    const text = header || '';
    const token = /[!#$%&'*+\-.^_`|~0-9A-Za-z]+/y;
    let i = 0;
    const spaces = () => { while (text[i] === ' ' || text[i] === '\t') i++; };
    const word = () => { token.lastIndex = i; const m = token.exec(text); if (!m) return ''; i = token.lastIndex; return m[0]; };
    const value = () => {
      if (text[i] !== '"') return word();
      let out = '';
      for (i++; i < text.length && text[i] !== '"'; i++) out += text[i] === '\\' ? text[++i] ?? '' : text[i];
      i++;
      return out;
    };
    while (i < text.length) {
      spaces();
      const metric = { name: word(), dur: null, desc: '' };
      spaces();
      while (text[i] === ';') {
        i++; spaces();
        const key = word().toLowerCase();
        spaces();
        let given = '';
        if (text[i] === '=') { i++; spaces(); given = value(); spaces(); }
        if (key === 'dur' && metric.dur === null && Number.isFinite(Number(given)) && given !== '') metric.dur = Number(given);
        if (key === 'desc' && !metric.desc) metric.desc = given;
      }
      if (metric.name) metrics.push(metric);
      while (i < text.length && text[i] !== ',') { if (text[i] === '"') value(); else i++; } // past what is malformed
      i++;
    }
    return metrics;
  }
  function showTiming(elapsed, response) {
    const stages = parseServerTiming(response.headers.get('Server-Timing'));
    const box = $('timing');
    box.replaceChildren(element('p', {},
      element('strong', { textContent: ms(elapsed) }),
      ` from sending to the answer's last byte, in this browser · HTTP ${response.status}`));
    if (stages.length) {
      const rows = stages.map((s) => element('tr', {},
        element('td', { textContent: s.desc ? `${s.name} (${s.desc})` : s.name }),
        element('td', { className: 'ms', textContent: s.dur === null ? '' : ms(s.dur) })));
      box.append(element('table', {}, element('caption', { className: 'hidden', textContent: 'Stages, as the engine timed them' }),
        element('tbody', {}, ...rows)));
    }
    box.hidden = false;
  }
  function where(mark) {
    const r = mark.result;
    const n = (x, places) => Number(x).toFixed(places);
    if (mark.kind === 'box') return `${n(r.xmin, 0)}, ${n(r.ymin, 0)} to ${n(r.xmax, 0)}, ${n(r.ymax, 0)}`;
    if (mark.kind === 'oriented') return `cx ${n(r.cx, 3)} cy ${n(r.cy, 3)} w ${n(r.w, 3)} h ${n(r.h, 3)} r ${n(r.r, 3)}`;
    if (mark.kind === 'region') {
      const points = mark.outlines.reduce((sum, o) => sum + o.length, 0);
      return `${mark.outlines.length} contour${mark.outlines.length === 1 ? '' : 's'}, ${points} points`;
    }
    return '';
  }
  function resultsView(marks) {
    const answers = marks.filter((m) => m.kind === 'answer');
    const scored = marks.filter((m) => m.kind !== 'answer');
    const views = [];
    if (answers.length) {
      views.push(element('ul', { className: 'answers' }, ...answers.map((m) => element('li', {},
        element('span', { className: 'q', textContent: m.prompt ? `Q: ${m.prompt}` : 'About the picture' }),
        element('span', { className: 'a', textContent: m.caption })))));
    }
    if (scored.length) {
      const placed = scored.some((m) => m.outlines.length);
      const rows = scored.map((m) => {
        const swatch = element('span', { className: 'swatch' });
        swatch.style.background = rgba(m.colour);
        const bar = element('span', { className: 'bar' }, element('span'));
        bar.firstChild.style.width = `${Math.max(0, Math.min(1, Number(m.score) || 0)) * 100}%`;
        bar.firstChild.style.background = rgba(m.colour);
        bar.setAttribute('aria-hidden', 'true');
        const score = 'score' in m.result ? twoPlaces(m.score) : '';
        return element('tr', {},
          element('td', { className: 'label' }, swatch, m.label),
          element('td', { className: 'score' }, score, ...(score ? [bar] : [])),
          ...(placed ? [element('td', { className: 'where', textContent: where(m) })] : []));
      });
      const headings = placed ? ['label', 'score', 'where'] : ['label', 'score'];
      views.push(element('table', { className: 'results' },
        element('thead', {}, element('tr', {}, ...headings.map((h) => element('th', { scope: 'col', textContent: h })))),
        element('tbody', {}, ...rows)));
    }
    return views;
  }
  async function figure(picture, results, answered) {
    const node = element('figure');
    let bitmap = null;
    try { bitmap = await createImageBitmap(picture.file, { imageOrientation: 'from-image' }); } catch { /* said below */ }
    const marks = bitmap ? marksOf(results, bitmap.width, bitmap.height) : [];
    const about = [element('strong', { textContent: picture.name })];
    if (bitmap) {
      const { width, height } = bitmap;
      // Small pictures are drawn larger, so that lines and captions stay sharp.
      const k = Math.min(4, Math.max(1, Math.ceil(640 / Math.max(width, height))));
      const canvas = element('canvas', { width: width * k, height: height * k });
      const ctx = canvas.getContext('2d');
      ctx.imageSmoothingEnabled = k === 1;
      ctx.drawImage(bitmap, 0, 0, width * k, height * k);
      ctx.setTransform(k, 0, 0, k, 0, 0);
      drawMarks(ctx, marks, width, height);
      canvas.setAttribute('role', 'img');
      canvas.setAttribute('aria-label', `${picture.name}, with what the model found drawn on it (listed below)`);
      node.append(canvas);
      about.push(` · ${width} × ${height}`);
    } else {
      about.push(' · this browser cannot show this file');
    }
    if (answered) about.push(` · ${results.length} result${results.length === 1 ? '' : 's'}`);
    node.append(element('figcaption', {}, ...about), ...resultsView(marks));
    if (answered && !results.length) node.append(element('p', { className: 'hint', textContent: 'The model found nothing.' }));
    return node;
  }
  // What is shown of a request or an answer: long strings (the pictures' base64) cut short. What is sent is whole.
  function shortened(key, value) {
    return typeof value === 'string' && value.length > 160
      ? `${value.slice(0, 48)}… (${value.length.toLocaleString('en')} characters)` : value;
  }
  function shown(value) {
    const text = JSON.stringify(value, shortened, 2);
    return text.length > 200000 ? `${text.slice(0, 200000)}\n… (${(text.length - 200000).toLocaleString('en')} more characters)` : text;
  }
  const quoted = (text) => `'${text.replace(/'/g, "'\\''")}'`;
  const PLACE = (i) => `@@picture-${i}@@`;
  const withPlaces = (body) => JSON.stringify({ ...body, inputs: body.inputs.map((input, i) => ({ ...input, data: [PLACE(i)] })) });
  function curlOf(url, body, pictures) {
    // In a here-document the shell expands $, ` and \: the request's own are escaped, the base64 of each file is not.
    const json = withPlaces(body).replace(/[\\$`]/g, (c) => `\\${c}`)
      .replace(/@@picture-(\d+)@@/g, (_, i) => `$(base64 -w0 ${quoted(pictures[i].name)})`);
    return `# in the pictures' folder (on macOS: base64 -i FILE)\ncurl -s ${quoted(url.href)} -H 'Content-Type: application/json' -d @- <<EOF\n${json}\nEOF`;
  }
  function pythonOf(url, body, pictures) {
    const json = withPlaces(body).replace(/"@@picture-(\d+)@@"/g, (_, i) => `b64(${JSON.stringify(pictures[i].name)})`);
    return ['# in the pictures\' folder', 'import base64', 'import json', '', 'import requests', '', '',
      'def b64(path):', '    with open(path, "rb") as f:', '        return base64.b64encode(f.read()).decode()', '', '',
      `body = ${json}`, `answer = requests.post(${JSON.stringify(url.href)}, json=body, timeout=60)`,
      'print(answer.status_code, json.dumps(answer.json(), indent=2))'].join('\n');
  }
  function showReturned(answer) {
    const box = $('returned');
    const passed = answer && answer.parameters && answer.parameters.metadata;
    box.hidden = !passed;
    if (!passed) return;
    let rows = null;
    try { rows = JSON.parse(passed).extended_metadata; } catch { /* shown as it came */ }
    const title = element('h3', { textContent: 'Metadata the engine passed through (parameters.metadata)' });
    if (!Array.isArray(rows)) { box.replaceChildren(title, element('pre', { textContent: String(passed) })); return; }
    box.replaceChildren(title, element('table', {},
      element('thead', {}, element('tr', {}, ...['key', 'type', 'value'].map((h) => element('th', { scope: 'col', textContent: h })))),
      element('tbody', {}, ...rows.map((row) => element('tr', {}, ...['key', 'type', 'value'].map((k) => element('td', { textContent: String(row[k]) })))))));
  }
  async function show(pictures, url, body, response, text, elapsed) {
    let answer = null;
    try { answer = JSON.parse(text); } catch { /* shown as text */ }
    showTiming(elapsed, response);
    $('request-json').textContent = shown(body);
    $('response-json').textContent = answer === null ? text.slice(0, 200000) : shown(answer);
    $('curl').textContent = curlOf(url, body, pictures);
    $('python').textContent = pythonOf(url, body, pictures);
    $('exchange').hidden = false;
    showReturned(response.ok ? answer : null);
    const outputs = new Map(((answer && answer.outputs) || []).map((output) => [output.name, output]));
    const figures = await Promise.all(pictures.map((picture, i) => {
      const output = outputs.get(`image-${i}`);
      const results = output && Array.isArray(output.data) && Array.isArray(output.data[0]) ? output.data[0] : [];
      return figure(picture, results, response.ok);
    }));
    $('figures').replaceChildren(...figures);
    // On a phone the answer is below the form: brought into view.
    if (matchMedia('(max-width: 760px)').matches) $('answer').scrollIntoView();
    if (response.ok) {
      $('error').hidden = true;
      status(`${state.task.name} · answered`);
    } else {
      const said = answer && typeof answer.error === 'string' ? answer.error : text.slice(0, 2000) || response.statusText;
      showError(said, `${response.status} ${response.statusText}`.trim());
    }
  }

  // --- wiring ----------------------------------------------------------------------------------------------------
  $('files').addEventListener('change', (event) => { take(event.target.files); event.target.value = ''; });
  $('request').addEventListener('submit', (event) => { event.preventDefault(); send(); });
  $('add-metadata').addEventListener('click', () => addMetadataRow());
  const carriesFiles = (event) => event.dataTransfer && [...event.dataTransfer.types].includes('Files');
  document.addEventListener('dragover', (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    $('drop').classList.add('over');
  });
  document.addEventListener('dragleave', (event) => { if (!event.relatedTarget) $('drop').classList.remove('over'); });
  document.addEventListener('drop', (event) => {
    if (!carriesFiles(event)) return;
    event.preventDefault();
    $('drop').classList.remove('over');
    take(event.dataTransfer.files);
  });
  document.addEventListener('paste', (event) => {
    const files = event.clipboardData ? [...event.clipboardData.files] : [];
    if (!files.length) return; // text pasted into a field stays there
    event.preventDefault();
    take(files);
  });
  for (const button of document.querySelectorAll('.copy')) {
    button.addEventListener('click', async () => {
      const pre = $(button.dataset.copy);
      try {
        await navigator.clipboard.writeText(pre.textContent);
        button.textContent = 'Copied';
      } catch {
        getSelection().selectAllChildren(pre); // no clipboard here (a page over plain http): selected, to copy by hand
        button.textContent = 'Selected: copy it';
      }
      setTimeout(() => { button.textContent = 'Copy'; }, 2000);
    });
  }
  discover();
})();
