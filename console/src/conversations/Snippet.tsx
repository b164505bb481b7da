// A search snippet with the matched words marked: the service marks them <mark>…</mark> in the
// user's own text, so the text is split on the markers and rendered as text, never as HTML.

export function snippetParts(snippet: string): { text: string; marked: boolean }[] {
  const parts: { text: string; marked: boolean }[] = [];
  let marked = false;
  for (const piece of snippet.split(/(<mark>|<\/mark>)/)) {
    if (piece === "<mark>") marked = true;
    else if (piece === "</mark>") marked = false;
    else if (piece) parts.push({ text: piece, marked });
  }
  return parts;
}

export function Snippet({ snippet }: { snippet: string }) {
  return (
    <span className="snippet">
      {snippetParts(snippet).map((part, n) => (part.marked ? <mark key={n}>{part.text}</mark> : <span key={n}>{part.text}</span>))}
    </span>
  );
}
