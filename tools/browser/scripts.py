"""What runs inside the page: numbering interactive elements and turning the DOM into markdown.

Both are plain functions evaluated with `page.evaluate`, so they need no extension and leave
nothing behind but the index attribute: the model clicks by a number it was shown, and the
number must find the same element later without depending on selectors the page may change.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

#: The attribute that carries an element's index between `get_state` and `click`/`type`.
INDEX_ATTRIBUTE = "data-agent-index"

#: What counts as interactive; `[onclick]` only sees inline handlers (listeners added from
#: script are invisible to the DOM), which is why role and tabindex hints are included too.
_INTERACTIVE = ", ".join(
    [
        "a[href]",
        "button",
        "input:not([type=hidden])",
        "select",
        "textarea",
        "summary",
        "[onclick]",
        "[contenteditable='']",
        "[contenteditable='true']",
        "[tabindex]:not([tabindex='-1'])",
        *(
            f"[role={role}]"
            for role in (
                *("button", "link", "checkbox", "radio", "tab", "menuitem", "option"),
                *("switch", "textbox", "combobox", "searchbox", "slider", "spinbutton"),
                "treeitem",
            )
        ),
    ]
)

#: Numbers the visible interactive elements of the document (open shadow roots included,
#: iframes not) and describes them. Old numbers are removed first so an index never points
#: at two elements.
INDEX_ELEMENTS_JS = """
([attr, selector, limit]) => {
  for (const el of document.querySelectorAll('[' + attr + ']')) el.removeAttribute(attr);
  const found = [];
  const roots = [document];
  while (roots.length) {
    const root = roots.shift();
    for (const el of root.querySelectorAll(selector)) found.push(el);
    for (const el of root.querySelectorAll('*')) if (el.shadowRoot) roots.push(el.shadowRoot);
  }
  const squash = (s, n) => {
    s = (s || '').replace(/\\s+/g, ' ').trim();
    return s.length > n ? s.slice(0, n - 1) + '\\u2026' : s;
  };
  const out = [];
  let total = 0;
  for (const el of found) {
    const rect = el.getBoundingClientRect();
    if (rect.width === 0 && rect.height === 0) continue;
    if (el.checkVisibility && !el.checkVisibility({visibilityProperty: true})) continue;
    if (out.length >= limit) { total += 1; continue; }
    const index = out.length;
    el.setAttribute(attr, String(index));
    total += 1;
    const tag = el.tagName.toLowerCase();
    const type = (el.getAttribute('type') || '').toLowerCase();
    let value = null;
    if (tag === 'select') {
      value = squash(Array.from(el.selectedOptions, o => o.label).join(', '), 80);
    } else if (tag === 'textarea' || (tag === 'input' && !['checkbox', 'radio', 'submit',
               'button', 'reset', 'image', 'file'].includes(type))) {
      value = type === 'password' && el.value ? '********' : squash(el.value, 80);
    }
    out.push({
      index,
      tag,
      type: type || null,
      role: el.getAttribute('role'),
      name: el.getAttribute('name'),
      label: squash(el.getAttribute('aria-label') || el.getAttribute('title') ||
                    (el.labels && el.labels[0] ? el.labels[0].innerText : ''), 80) || null,
      placeholder: el.getAttribute('placeholder'),
      text: squash(
        tag === 'select' || tag === 'textarea' || (tag === 'input' && value !== null) ? ''
          : (el.innerText || el.value || el.getAttribute('alt') || ''), 100) || null,
      value,
      href: tag === 'a' ? el.href : null,
      checked: (type === 'checkbox' || type === 'radio') ? el.checked : null,
      disabled: el.disabled === true || el.getAttribute('aria-disabled') === 'true',
      options: tag === 'select'
        ? Array.from(el.options).slice(0, 20).map(o => squash(o.label, 40)) : null,
      in_view: rect.bottom > 0 && rect.top < innerHeight
        && rect.right > 0 && rect.left < innerWidth,
    });
  }
  return {
    elements: out,
    total,
    scroll_y: Math.round(scrollY),
    viewport_height: innerHeight,
    page_height: Math.round(document.documentElement.scrollHeight),
  };
}
"""

#: Readable text of the page as markdown: headings, paragraphs, lists, quotes, code, tables,
#: and links as [text](url) when asked. Hidden subtrees and non-content tags are skipped.
MARKDOWN_JS = """
(withLinks) => {
  const SKIP = new Set(['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'SVG', 'CANVAS', 'IFRAME',
                        'HEAD', 'META', 'LINK', 'INPUT', 'SELECT', 'TEXTAREA', 'OBJECT']);
  const BLOCK = new Set(['P', 'DIV', 'SECTION', 'ARTICLE', 'MAIN', 'HEADER', 'FOOTER', 'NAV',
                         'ASIDE', 'FORM', 'FIELDSET', 'FIGURE', 'FIGCAPTION', 'DL', 'DT', 'DD',
                         'ADDRESS', 'DETAILS', 'SUMMARY', 'LABEL', 'CAPTION', 'BODY']);
  const hidden = (el) => {
    if (el.checkVisibility) return !el.checkVisibility({visibilityProperty: true});
    const s = getComputedStyle(el);
    return s.display === 'none' || s.visibility === 'hidden';
  };
  const childrenOf = (el) => {
    if (el.shadowRoot) return Array.from(el.shadowRoot.childNodes);
    if (el.tagName === 'SLOT') return el.assignedNodes({flatten: true});
    return Array.from(el.childNodes);
  };
  const inner = (el, ctx) => childrenOf(el).map(n => md(n, ctx)).join('');
  const oneLine = (s) => s.replace(/\\s+/g, ' ').trim();
  const list = (el, ctx) => {
    const ordered = el.tagName === 'OL';
    const indent = '  '.repeat(ctx.depth);
    let n = Number(el.getAttribute('start') || 1);
    const lines = [];
    for (const li of el.children) {
      if (li.tagName !== 'LI' || hidden(li)) continue;
      const body = inner(li, {...ctx, depth: ctx.depth + 1}).replace(/\\n{2,}/g, '\\n').trim();
      const marker = ordered ? (n++) + '. ' : '- ';
      body.split('\\n').forEach((line, i) => {
        if (i === 0) lines.push(indent + marker + line.trim());
        else if (/^\\s*([-*]|\\d+\\.) /.test(line)) lines.push(line);
        else if (line.trim()) lines.push(indent + '   ' + line.trim());
      });
    }
    return '\\n\\n' + lines.join('\\n') + '\\n\\n';
  };
  const table = (el, ctx) => {
    const rows = [];
    for (const tr of el.querySelectorAll('tr')) {
      if (tr.closest('table') !== el || hidden(tr)) continue;
      const cells = Array.from(tr.children).filter(c => c.tagName === 'TD' || c.tagName === 'TH')
        .map(c => oneLine(inner(c, ctx)).replace(/\\|/g, '\\\\|'));
      if (cells.length) rows.push('| ' + cells.join(' | ') + ' |');
      if (rows.length === 1) rows.push('|' + cells.map(() => ' --- |').join(''));
    }
    return '\\n\\n' + rows.join('\\n') + '\\n\\n';
  };
  const md = (node, ctx) => {
    if (node.nodeType === Node.TEXT_NODE) {
      return ctx.pre ? node.textContent : node.textContent.replace(/\\s+/g, ' ');
    }
    if (node.nodeType !== Node.ELEMENT_NODE) return '';
    const el = node, tag = el.tagName;
    if (SKIP.has(tag) || hidden(el)) return '';
    if (/^H[1-6]$/.test(tag)) {
      const text = oneLine(inner(el, ctx));
      return text ? '\\n\\n' + '#'.repeat(Number(tag[1])) + ' ' + text + '\\n\\n' : '';
    }
    if (BLOCK.has(tag)) return '\\n\\n' + inner(el, ctx) + '\\n\\n';
    switch (tag) {
      case 'BR': return '\\n';
      case 'HR': return '\\n\\n---\\n\\n';
      case 'UL': case 'OL': return list(el, ctx);
      case 'LI': return '\\n- ' + oneLine(inner(el, ctx)) + '\\n';
      case 'TABLE': return table(el, ctx);
      case 'PRE': {
        const code = inner(el, {...ctx, pre: true}).replace(/\\n+$/, '');
        return '\\n\\n```\\n' + code + '\\n```\\n\\n';
      }
      case 'BLOCKQUOTE': {
        const body = inner(el, ctx).replace(/\\n{3,}/g, '\\n\\n').trim();
        return '\\n\\n' + body.split('\\n').map(l => '> ' + l.trim()).join('\\n') + '\\n\\n';
      }
      case 'A': {
        const text = oneLine(inner(el, ctx));
        const href = el.href;
        if (!withLinks || !href || href.startsWith('javascript:')) {
          return text ? ' ' + text + ' ' : '';
        }
        return ' [' + (text || href) + '](' + href + ') ';
      }
      case 'IMG': {
        const alt = oneLine(el.getAttribute('alt') || '');
        if (withLinks && el.src && !el.src.startsWith('data:')) {
          return '![' + alt + '](' + el.src + ')';
        }
        return alt ? '[image: ' + alt + ']' : '';
      }
      case 'STRONG': case 'B': {
        const text = oneLine(inner(el, ctx));
        return text ? ' **' + text + '** ' : '';
      }
      case 'EM': case 'I': {
        const text = oneLine(inner(el, ctx));
        return text ? ' *' + text + '* ' : '';
      }
      case 'CODE': {
        if (ctx.pre) return inner(el, ctx);
        const text = oneLine(inner(el, ctx));
        return text ? '`' + text + '`' : '';
      }
      case 'BUTTON': {
        const text = oneLine(inner(el, ctx));
        return text ? ' [button: ' + text + '] ' : '';
      }
      default: return inner(el, ctx);
    }
  };
  const raw = document.body ? md(document.body, {depth: 0, pre: false}) : '';
  const out = [];
  let fenced = false;
  for (let line of raw.split('\\n')) {
    if (line.startsWith('```')) fenced = !fenced;
    if (!fenced) {
      line = line.replace(/[ \\t]+$/, '');
      if (!/^\\s*([-*]|\\d+\\.) /.test(line)) line = line.replace(/^\\s+/, '');
      line = line.replace(/(\\S) {2,}/g, '$1 ');
    }
    out.push(line);
  }
  return out.join('\\n').replace(/\\n{3,}/g, '\\n\\n').trim();
}
"""


class IndexedElement(BaseModel):
    """One numbered element as the page script reports it."""

    model_config = ConfigDict(extra="ignore")

    index: int
    tag: str
    type: str | None = None
    role: str | None = None
    name: str | None = None
    label: str | None = None
    placeholder: str | None = None
    text: str | None = None
    value: str | None = None
    href: str | None = None
    checked: bool | None = None
    disabled: bool = False
    options: list[str] | None = None
    in_view: bool = True

    def describe(self) -> str:
        """One line the model can act on: `[3] <input type=text name=q> value="..."`."""
        attrs = [self.tag]
        for key in ("type", "role", "name", "placeholder", "label"):
            value = getattr(self, key)
            if value:
                attrs.append(f'{key}="{value}"' if " " in value else f"{key}={value}")
        if self.disabled:
            attrs.append("disabled")
        if self.checked is not None:
            attrs.append("checked" if self.checked else "unchecked")
        line = f"[{self.index}] <{' '.join(attrs)}>"
        if self.text:
            line += f" {self.text}"
        if self.value is not None:
            line += f' value="{self.value}"'
        if self.options:
            line += f" options: {' | '.join(self.options)}"
        if self.href:
            line += f" -> {self.href}"
        if not self.in_view:
            line += " (scroll to see)"
        return line


class PageIndex(BaseModel):
    """The result of one numbering pass."""

    model_config = ConfigDict(extra="ignore")

    elements: list[IndexedElement]
    total: int
    scroll_y: int
    viewport_height: int
    page_height: int

    def describe(self) -> str:
        above = self.scroll_y
        below = max(0, self.page_height - self.scroll_y - self.viewport_height)
        lines = [f"Scroll: {above} px above the viewport, {below} px below."]
        if not self.elements:
            lines.append("No interactive elements are visible on this page.")
            return "\n".join(lines)
        lines.append("Interactive elements (browser_click / browser_type take the [index]):")
        lines.extend(e.describe() for e in self.elements)
        if self.total > len(self.elements):
            lines.append(f"... {self.total - len(self.elements)} more elements not numbered.")
        return "\n".join(lines)


def index_arguments(limit: int) -> list[object]:
    """The argument list INDEX_ELEMENTS_JS expects."""
    return [INDEX_ATTRIBUTE, _INTERACTIVE, limit]


def index_selector(index: int) -> str:
    """The CSS selector that finds element `index` of the last numbering pass."""
    return f'[{INDEX_ATTRIBUTE}="{index}"]'
