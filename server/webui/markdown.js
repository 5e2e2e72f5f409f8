// A small, safe Markdown renderer for the chat page (no dependencies).
//
// renderMarkdown(text) returns HTML in which every character of the input is
// escaped first: the model's output can never inject markup, only the
// constructs below are produced. Block level, line by line: fenced code
// (``` or ~~~, with a language tag; an unterminated fence runs to the end, so
// a block being streamed renders as code), ATX headings (# to ######),
// blockquotes (>), unordered (-, *, +) and ordered (1. or 1)) lists with
// nesting by indentation, horizontal rules, paragraphs (single newlines are
// kept as <br>). Inline: `code`, **bold**, *italic* / _italic_, ~~strike~~,
// [links](url) and bare http(s) URLs. A link's URL must be http(s), mailto or
// relative; anything else (javascript:, data:) is shown as text.

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export function escapeHtml(s) {
  return String(s).replace(/[&<>"']/g, (c) => ESC[c]);
}

function safeUrl(raw) {
  const url = raw.trim();
  if (/^(https?:|mailto:)/i.test(url)) return url;
  if (/^[a-z][a-z0-9+.-]*:/i.test(url)) return null;  // any other scheme
  return url;  // relative
}

// Inline spans of one block's text (raw, unescaped).
function inline(text) {
  const codes = [];
  // Code spans first: their content is taken literally. \u0000 cannot come
  // from the input (it is stripped in renderMarkdown).
  let s = text.replace(/(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/g, (m, ticks, body) => {
    codes.push(`<code>${escapeHtml(body.trim() === '' ? body : body.replace(/^ (.*) $/s, '$1'))}</code>`);
    return `\u0000${codes.length - 1}\u0000`;
  });
  const links = [];
  s = s.replace(/\[([^\]\n]+)\]\(([^()\s]+)\)/g, (m, label, url) => {
    const u = safeUrl(url);
    if (u === null) return m;
    links.push({ label, url: u });
    return `\u0001${links.length - 1}\u0001`;
  });
  s = escapeHtml(s);
  s = s.replace(/\bhttps?:\/\/[^\s<>&"']*[^\s<>&"'.,;:!?)\]]/g, (u) => `<a href="${u}" target="_blank" rel="noopener noreferrer">${u}</a>`);
  s = s.replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>');
  s = s.replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>');
  s = s.replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>');
  s = s.replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]*?[^\s*])\*(?![*\w])/g, '$1<em>$2</em>');
  s = s.replace(/(^|[^_\w])_(?=[^\s_])([^_\n]*?[^\s_])_(?![_\w])/g, '$1<em>$2</em>');
  s = s.replace(/\u0001(\d+)\u0001/g, (m, i) => {
    const l = links[+i];
    return `<a href="${escapeHtml(l.url)}" target="_blank" rel="noopener noreferrer">${inline(l.label)}</a>`;
  });
  s = s.replace(/\u0000(\d+)\u0000/g, (m, i) => codes[+i]);
  return s.replace(/\n/g, '<br>');
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?(.*)$/;
const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;

function renderList(lines, start) {
  // Items at the indentation of lines[start]; deeper lines belong to the item above.
  const first = ITEM.exec(lines[start]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const items = [];
  let i = start;
  while (i < lines.length) {
    const m = ITEM.exec(lines[i]);
    if (m && m[1].length === indent && /\d/.test(m[2]) === ordered) {
      items.push({ text: [m[3]], children: '' });
      ++i;
      continue;
    }
    if (m && m[1].length > indent && items.length) {
      const sub = renderList(lines, i);
      items[items.length - 1].children += sub.html;
      i = sub.next;
      continue;
    }
    const cont = lines[i];
    if (cont.trim() !== '' && /^\s+\S/.test(cont) && items.length && !m) {
      items[items.length - 1].text.push(cont.trim());  // a continuation line
      ++i;
      continue;
    }
    break;
  }
  const tag = ordered ? 'ol' : 'ul';
  const startAttr = ordered && parseInt(first[2], 10) !== 1 ? ` start="${parseInt(first[2], 10)}"` : '';
  const body = items.map((it) => `<li>${inline(it.text.join('\n'))}${it.children}</li>`).join('');
  return { html: `<${tag}${startAttr}>${body}</${tag}>`, next: i };
}

export function renderMarkdown(text) {
  const lines = String(text).replace(/\r\n?/g, '\n').replace(/[\u0000\u0001]/g, '').split('\n');
  const out = [];
  let para = [];
  const flush = () => {
    if (para.length) out.push(`<p>${inline(para.join('\n'))}</p>`);
    para = [];
  };
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if ((m = FENCE.exec(line))) {
      flush();
      const fence = m[1];
      const lang = m[2];
      const body = [];
      ++i;
      while (i < lines.length && !new RegExp(`^ {0,3}${fence[0]}{${fence.length},}\\s*$`).test(lines[i])) body.push(lines[i++]);
      ++i;  // the closing fence (or past the end)
      const cls = lang ? ` class="language-${escapeHtml(lang)}"` : '';
      const label = lang ? `<span class="code-lang">${escapeHtml(lang)}</span>` : '';
      out.push(`<div class="code">${label}<button class="copy" type="button">copy</button>` +
               `<pre><code${cls}>${escapeHtml(body.join('\n'))}</code></pre></div>`);
      continue;
    }
    if (line.trim() === '') {
      flush();
      ++i;
      continue;
    }
    if ((m = HEADING.exec(line))) {
      flush();
      const n = m[1].length;
      out.push(`<h${n}>${inline(m[2])}</h${n}>`);
      ++i;
      continue;
    }
    if (RULE.test(line)) {
      flush();
      out.push('<hr>');
      ++i;
      continue;
    }
    if (QUOTE.test(line)) {
      flush();
      const body = [];
      while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
        body.push(m[1]);
        ++i;
      }
      out.push(`<blockquote>${renderMarkdown(body.join('\n'))}</blockquote>`);
      continue;
    }
    if (ITEM.test(line) && (para.length === 0 || /^\s*([-*+]|1[.)])\s/.test(line))) {
      flush();
      const list = renderList(lines, i);
      out.push(list.html);
      i = list.next;
      continue;
    }
    para.push(line);
    ++i;
  }
  flush();
  return out.join('\n');
}
