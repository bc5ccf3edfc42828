// markdown.js — a small Markdown renderer that builds DOM nodes directly.
// It never parses HTML: every piece of text lands in the page through
// textContent / createTextNode, so model output such as <script> or
// <img onerror=...> shows up as literal text. Owns: renderMarkdown() and
// highlightCode() (simple token colouring for fenced code blocks).

const SAFE_LINK = /^(https?:|mailto:)/i;

function el(tag, cls, text) {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined) node.textContent = text;
  return node;
}

// ---------- inline ----------

// Order matters: code first (its content is literal), then links, bold, italic.
const INLINE = /(`+)([\s\S]*?[^`])\1(?!`)|\[([^\]\n]+)\]\(([^)\s]+)(?:\s+"[^"]*")?\)|\*\*([^*\n][\s\S]*?)\*\*|__([^_\n][\s\S]*?)__|\*([^*\s][^*\n]*?)\*|(^|[^\w])_([^_\s][^_\n]*?)_(?!\w)|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/;

function renderInline(text, parent) {
  let rest = text;
  while (rest.length) {
    const m = INLINE.exec(rest);
    if (!m) {
      appendText(parent, rest);
      break;
    }
    let start = m.index;
    if (m[8] !== undefined) start += m[8].length; // keep the char before _x_
    appendText(parent, rest.slice(0, start));
    if (m[1] !== undefined) {
      parent.appendChild(el('code', null, m[2].replace(/^ (.*) $/, '$1')));
    } else if (m[3] !== undefined) {
      const url = m[4];
      if (SAFE_LINK.test(url)) {
        const a = el('a');
        a.href = url;
        a.rel = 'noopener noreferrer';
        a.target = '_blank';
        renderInline(m[3], a);
        parent.appendChild(a);
      } else {
        appendText(parent, m[0]);
      }
    } else if (m[5] !== undefined || m[6] !== undefined) {
      const b = el('strong');
      renderInline(m[5] !== undefined ? m[5] : m[6], b);
      parent.appendChild(b);
    } else if (m[7] !== undefined || m[9] !== undefined) {
      const i = el('em');
      renderInline(m[7] !== undefined ? m[7] : m[9], i);
      parent.appendChild(i);
    } else if (m[10] !== undefined) {
      const a = el('a', null, m[10]);
      a.href = m[10];
      a.rel = 'noopener noreferrer';
      a.target = '_blank';
      parent.appendChild(a);
    }
    rest = rest.slice(m.index + m[0].length);
  }
}

function appendText(parent, text) {
  if (!text) return;
  // Hard line break: two trailing spaces or a backslash before a newline.
  const parts = text.split(/(?: {2,}|\\)\n/);
  parts.forEach((part, i) => {
    if (i) parent.appendChild(document.createElement('br'));
    if (part) parent.appendChild(document.createTextNode(part));
  });
}

// ---------- code highlighting ----------

const KEYWORDS = new Set((
  'and as assert async await break case catch class const continue def del do ' +
  'elif else enum except export extends false False finally fn for from func ' +
  'function global go if impl import in interface is lambda let match mod mut ' +
  'new nil none None nonlocal not null or package pass private protected pub ' +
  'public raise return self static struct super switch this throw true True try ' +
  'type typeof undefined use var void while with yield ' +
  'int char float double long short unsigned signed bool auto sizeof typedef ' +
  'include define then fi esac done echo elif local export function readonly'
).split(' '));

const TOKEN = /(\/\/[^\n]*|\/\*[\s\S]*?\*\/|#[^\n]*|--[^\n]*)|("""[\s\S]*?"""|'''[\s\S]*?'''|"(?:\\.|[^"\\\n])*"|'(?:\\.|[^'\\\n])*'|`(?:\\.|[^`\\])*`)|(\b(?:0x[0-9a-fA-F]+|\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\b)|([A-Za-z_$][\w$]*)/g;

const HASH_COMMENT = new Set(['python', 'py', 'sh', 'bash', 'shell', 'zsh', 'ruby', 'rb',
  'perl', 'r', 'yaml', 'yml', 'toml', 'make', 'makefile', 'dockerfile', 'console', 'ini', 'conf']);
const DASH_COMMENT = new Set(['sql', 'lua', 'haskell', 'hs']);

export function highlightCode(code, lang, parent) {
  lang = (lang || '').toLowerCase();
  const hash = HASH_COMMENT.has(lang) || lang === '';
  const dash = DASH_COMMENT.has(lang);
  let last = 0;
  TOKEN.lastIndex = 0;
  let m;
  while ((m = TOKEN.exec(code)) !== null) {
    let cls = null;
    if (m[1] !== undefined) {
      const c = m[1];
      if (c[0] === '#' && !hash) { TOKEN.lastIndex = m.index + 1; continue; }
      if (c.startsWith('--') && !dash) { TOKEN.lastIndex = m.index + 2; continue; }
      if (c[0] === '#' && lang === '' && m.index > 0 && !/\s/.test(code[m.index - 1])) {
        TOKEN.lastIndex = m.index + 1; continue;
      }
      cls = 'tok-comment';
    } else if (m[2] !== undefined) cls = 'tok-string';
    else if (m[3] !== undefined) cls = 'tok-number';
    else if (m[4] !== undefined) cls = KEYWORDS.has(m[4]) ? 'tok-keyword' : null;
    if (!cls) continue;
    if (m.index > last) parent.appendChild(document.createTextNode(code.slice(last, m.index)));
    parent.appendChild(el('span', cls, m[0]));
    last = m.index + m[0].length;
  }
  if (last < code.length) parent.appendChild(document.createTextNode(code.slice(last)));
}

function codeBlock(code, lang) {
  const wrap = el('div', 'code-block');
  const bar = el('div', 'code-bar');
  bar.appendChild(el('span', 'code-lang', lang || 'text'));
  const copy = el('button', 'copy', 'copy');
  copy.type = 'button';
  copy.addEventListener('click', () => copyText(code, copy));
  bar.appendChild(copy);
  wrap.appendChild(bar);
  const pre = el('pre');
  const c = el('code');
  if (lang) c.className = 'language-' + lang.replace(/[^\w+-]/g, '');
  highlightCode(code, lang, c);
  pre.appendChild(c);
  wrap.appendChild(pre);
  return wrap;
}

function copyText(text, button) {
  const done = (ok) => {
    button.textContent = ok ? 'copied' : 'copy failed';
    setTimeout(() => { button.textContent = 'copy'; }, 1500);
  };
  if (navigator.clipboard && navigator.clipboard.writeText) {
    navigator.clipboard.writeText(text).then(() => done(true), () => done(fallbackCopy(text)));
  } else {
    done(fallbackCopy(text));
  }
}

function fallbackCopy(text) {
  const ta = document.createElement('textarea');
  ta.value = text;
  ta.className = 'offscreen';
  document.body.appendChild(ta);
  ta.select();
  let ok = false;
  try { ok = document.execCommand('copy'); } catch (e) { ok = false; }
  ta.remove();
  return ok;
}

// ---------- blocks ----------

const RE = {
  fence: /^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)[^`]*$/,
  heading: /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/,
  hr: /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/,
  quote: /^ {0,3}> ?(.*)$/,
  bullet: /^(\s*)([-*+])\s+(.*)$/,
  ordered: /^(\s*)(\d{1,9})[.)]\s+(.*)$/,
  tableSep: /^\s*\|?\s*:?-{1,}:?\s*(\|\s*:?-{1,}:?\s*)*\|?\s*$/,
};

function isBlockStart(line) {
  return RE.fence.test(line) || RE.heading.test(line) || RE.hr.test(line) ||
    RE.quote.test(line) || RE.bullet.test(line) || RE.ordered.test(line);
}

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const cells = [];
  let cur = '';
  for (let i = 0; i < s.length; i++) {
    if (s[i] === '\\' && s[i + 1] === '|') { cur += '|'; i++; continue; }
    if (s[i] === '|') { cells.push(cur.trim()); cur = ''; continue; }
    cur += s[i];
  }
  cells.push(cur.trim());
  return cells;
}

function renderTable(lines, i, parent) {
  const head = splitRow(lines[i]);
  const aligns = splitRow(lines[i + 1]).map((c) =>
    c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : c.startsWith(':') ? 'left' : '');
  const wrap = el('div', 'table-wrap');
  const table = el('table');
  const thead = el('thead');
  const tr = el('tr');
  head.forEach((cell, k) => {
    const th = el('th');
    if (aligns[k]) th.className = 'align-' + aligns[k];
    renderInline(cell, th);
    tr.appendChild(th);
  });
  thead.appendChild(tr);
  table.appendChild(thead);
  const tbody = el('tbody');
  let j = i + 2;
  while (j < lines.length && lines[j].includes('|') && lines[j].trim()) {
    const row = el('tr');
    const cells = splitRow(lines[j]);
    for (let k = 0; k < head.length; k++) {
      const td = el('td');
      if (aligns[k]) td.className = 'align-' + aligns[k];
      renderInline(cells[k] || '', td);
      row.appendChild(td);
    }
    tbody.appendChild(row);
    j++;
  }
  table.appendChild(tbody);
  wrap.appendChild(table);
  parent.appendChild(wrap);
  return j;
}

function renderList(lines, i, parent) {
  const first = RE.bullet.exec(lines[i]) || RE.ordered.exec(lines[i]);
  const ordered = !RE.bullet.test(lines[i]);
  const indent = first[1].length;
  const list = el(ordered ? 'ol' : 'ul');
  if (ordered && first[2] !== '1') list.start = parseInt(first[2], 10);
  let item = null;
  let itemLines = [];
  const flush = () => {
    if (!item) return;
    renderItem(itemLines, item);
    list.appendChild(item);
  };
  let j = i;
  while (j < lines.length) {
    const line = lines[j];
    const m = ordered ? RE.ordered.exec(line) : RE.bullet.exec(line);
    if (m && m[1].length <= indent + 1 && m[1].length >= indent) {
      flush();
      item = el('li');
      itemLines = [m[3]];
      j++;
      continue;
    }
    if (!line.trim()) {
      // A blank line ends the list unless the next line continues it.
      const next = lines[j + 1];
      if (next !== undefined && (/^\s{2,}\S/.test(next) ||
          (ordered ? RE.ordered.test(next) : RE.bullet.test(next)))) {
        itemLines.push('');
        j++;
        continue;
      }
      break;
    }
    const lead = line.match(/^\s*/)[0].length;
    if (lead > indent) {
      itemLines.push(line.slice(Math.min(lead, indent + 2)));
      j++;
      continue;
    }
    if (isBlockStart(line)) break;
    itemLines.push(line.trim()); // lazy continuation
    j++;
  }
  flush();
  parent.appendChild(list);
  return j;
}

function renderItem(itemLines, li) {
  const hasBlocks = itemLines.slice(1).some((l) => isBlockStart(l) || !l.trim());
  if (!hasBlocks) {
    renderInline(itemLines.join('\n'), li);
    return;
  }
  const frag = document.createDocumentFragment();
  renderBlocks(itemLines, frag);
  // A tight item's single paragraph reads better without the <p>.
  if (frag.childNodes.length && frag.firstChild.nodeName === 'P' && !itemLines.includes('')) {
    const p = frag.firstChild;
    while (p.firstChild) li.appendChild(p.firstChild);
    p.remove();
  }
  li.appendChild(frag);
}

function renderBlocks(lines, parent) {
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) { i++; continue; }

    let m = RE.fence.exec(line);
    if (m) {
      const marker = m[1];
      const body = [];
      i++;
      while (i < lines.length && !(lines[i].trim().startsWith(marker) &&
             lines[i].trim().replace(/[`~]/g, '') === '')) {
        body.push(lines[i]);
        i++;
      }
      if (i >= lines.length) {
        // No closing fence yet (still streaming): drop the trailing blank line.
        while (body.length && !body[body.length - 1].trim()) body.pop();
      }
      i++; // the closing fence
      parent.appendChild(codeBlock(body.join('\n'), m[2]));
      continue;
    }
    m = RE.heading.exec(line);
    if (m) {
      const h = el('h' + m[1].length);
      renderInline(m[2] || '', h);
      parent.appendChild(h);
      i++;
      continue;
    }
    if (RE.hr.test(line)) {
      parent.appendChild(el('hr'));
      i++;
      continue;
    }
    if (RE.quote.test(line)) {
      const inner = [];
      while (i < lines.length && lines[i].trim()) {
        const q = RE.quote.exec(lines[i]);
        inner.push(q ? q[1] : lines[i]);
        i++;
      }
      const bq = el('blockquote');
      renderBlocks(inner, bq);
      parent.appendChild(bq);
      continue;
    }
    if (RE.bullet.test(line) || RE.ordered.test(line)) {
      i = renderList(lines, i, parent);
      continue;
    }
    if (line.includes('|') && i + 1 < lines.length && RE.tableSep.test(lines[i + 1]) &&
        lines[i + 1].includes('-') && (lines[i + 1].includes('|') || line.trim().startsWith('|'))) {
      i = renderTable(lines, i, parent);
      continue;
    }
    // Indented code (4 spaces) at top level of a paragraph start.
    if (/^( {4}|\t)/.test(line)) {
      const body = [];
      while (i < lines.length && (/^( {4}|\t)/.test(lines[i]) || !lines[i].trim())) {
        body.push(lines[i].replace(/^( {4}|\t)/, ''));
        i++;
      }
      while (body.length && !body[body.length - 1].trim()) body.pop();
      parent.appendChild(codeBlock(body.join('\n'), ''));
      continue;
    }
    // Paragraph (a setext underline turns it into a heading).
    const para = [line];
    i++;
    let setext = 0;
    while (i < lines.length && lines[i].trim() && !isBlockStart(lines[i])) {
      if (/^ {0,3}=+\s*$/.test(lines[i])) { setext = 1; i++; break; }
      para.push(lines[i]);
      i++;
    }
    if (!setext && i < lines.length && /^ {0,3}-{2,}\s*$/.test(lines[i]) && para.length) {
      setext = 2;
      i++;
    }
    const p = el(setext ? 'h' + setext : 'p');
    renderInline(para.map((l) => l.replace(/^\s+/, '')).join('\n'), p);
    parent.appendChild(p);
  }
}

/**
 * Render Markdown text into a DocumentFragment of safe DOM nodes.
 * @param {string} text
 * @returns {DocumentFragment}
 */
export function renderMarkdown(text) {
  const frag = document.createDocumentFragment();
  const lines = String(text || '').replace(/\r\n?/g, '\n').split('\n');
  renderBlocks(lines, frag);
  return frag;
}
