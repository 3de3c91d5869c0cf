// Xpert Gateway console: an answer's Markdown as the platforms' cards show it (Lark card
// markdown, DingTalk and WeCom markdown messages): headings, bold, italic, strikethrough,
// inline code and fenced code, links, bulleted and numbered lists, quotes, rules and tables.
// Built as DOM nodes, never as HTML: a message's text never becomes markup, and a link is made
// only of an http(s) or mailto URL (anything else stays text). Loaded after dom.js.
(() => {
  "use strict";
  const { el } = window.xgwDom;
  const SAFE_URL = /^(https?:\/\/|mailto:)/i;
  const INLINE = new RegExp([
    /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)/.source,     // 1, 2: `code`
    /!\[([^\]]*)\]\(([^)\s]+)\)/.source,               // 3, 4: ![alt](url)
    /\[([^\]]+)\]\(([^)\s]+)\)/.source,                // 5, 6: [text](url)
    /\*\*(?=\S)([\s\S]*?\S)\*\*/.source,               // 7: **bold**
    /__(?=\S)([\s\S]*?\S)__/.source,                   // 8: __bold__
    /~~(?=\S)([\s\S]*?\S)~~/.source,                   // 9: ~~struck~~
    /\*(?=[^\s*])([^*]*?[^\s*])\*/.source,             // 10: *italic*
    /(https?:\/\/[^\s<>()]*[^\s<>().,;:!?'"\]])/.source, // 11: a bare URL
  ].join("|"), "g");
  const FENCE = /^\s*(```|~~~)/;
  const HEADING = /^(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^\s*([-*_])(\s*\1){2,}\s*$/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;
  const TABLE_SEP = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;

  function link(parent, url, label) {
    if (!SAFE_URL.test(url)) return null;
    const a = parent.appendChild(el("a", null, label));
    a.href = url;
    a.target = "_blank";
    a.rel = "noopener noreferrer";
    return a;
  }

  function inline(parent, text) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {
      if (m.index > last) parent.append(text.slice(last, m.index));
      last = m.index + m[0].length;
      if (m[1]) parent.appendChild(el("code", null, m[2]));
      else if (m[3] !== undefined) {
        // A picture: the platforms show it in the card; here, a link to it.
        if (!link(parent, m[4], "🖼 " + (m[3] || m[4]))) parent.append(m[0]);
      } else if (m[5] !== undefined) {
        const a = link(parent, m[6], null);
        if (a) inline(a, m[5]);
        else parent.append(m[0]);
      } else if (m[7] !== undefined || m[8] !== undefined) inline(parent.appendChild(el("strong")), m[7] ?? m[8]);
      else if (m[9] !== undefined) inline(parent.appendChild(el("del")), m[9]);
      else if (m[10] !== undefined) inline(parent.appendChild(el("em")), m[10]);
      else if (m[11]) link(parent, m[11], m[11]);
    }
    if (last < text.length) parent.append(text.slice(last));
  }

  const cells = (line) => line.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
  const opensBlock = (line, next) =>
    FENCE.test(line) || line.startsWith(">") || HEADING.test(line) || RULE.test(line) ||
    ITEM.test(line) || (line.includes("|") && next !== undefined && TABLE_SEP.test(next));

  function blocks(box, lines) {
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      let m;
      if (!line.trim()) { i++; continue; }
      if (FENCE.test(line)) {
        const code = [];
        for (i++; i < lines.length && !FENCE.test(lines[i]); i++) code.push(lines[i]);
        i++;
        box.appendChild(el("pre")).appendChild(el("code", null, code.join("\n")));
      } else if (line.startsWith(">")) {
        const quoted = [];
        for (; i < lines.length && lines[i].startsWith(">"); i++) quoted.push(lines[i].replace(/^> ?/, ""));
        blocks(box.appendChild(el("blockquote")), quoted);
      } else if ((m = HEADING.exec(line))) {
        inline(box.appendChild(el("h" + Math.min(m[1].length + 2, 6), "heading")), m[2]);
        i++;
      } else if (RULE.test(line)) {
        box.appendChild(el("hr"));
        i++;
      } else if ((m = ITEM.exec(line))) {
        const ordered = /\d/.test(m[2]);
        const list = box.appendChild(el(ordered ? "ol" : "ul"));
        if (ordered && parseInt(m[2], 10) !== 1) list.start = parseInt(m[2], 10);
        for (; i < lines.length && (m = ITEM.exec(lines[i])) && /\d/.test(m[2]) === ordered; i++) {
          inline(list.appendChild(el("li")), m[3]);
        }
      } else if (line.includes("|") && TABLE_SEP.test(lines[i + 1] || "")) {
        const table = box.appendChild(el("table"));
        const head = table.appendChild(el("thead")).appendChild(el("tr"));
        for (const c of cells(line)) inline(head.appendChild(el("th")), c);
        const body = table.appendChild(el("tbody"));
        for (i += 2; i < lines.length && lines[i].includes("|") && lines[i].trim(); i++) {
          const row = body.appendChild(el("tr"));
          for (const c of cells(lines[i])) inline(row.appendChild(el("td")), c);
        }
      } else {
        // A paragraph: its lines as written (the platforms keep single newlines).
        const p = box.appendChild(el("p"));
        for (let first = true; i < lines.length && lines[i].trim() && (first || !opensBlock(lines[i], lines[i + 1])); i++) {
          if (!first) p.append("\n");
          inline(p, lines[i]);
          first = false;
        }
      }
    }
  }

  window.xgwMarkdown = (text) => {
    const box = el("div", "rich");
    blocks(box, String(text || "").replace(/\r\n?/g, "\n").split("\n"));
    return box;
  };
})();
