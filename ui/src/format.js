const number = new Intl.NumberFormat();

// "1 data file", "1,204 data files"; "-" when unknown.
export const count = (n, noun, plural = `${noun}s`) => (n == null ? "-" : `${number.format(n)} ${n === 1 ? noun : plural}`);

// Bytes in the unit that suits them, to three significant figures: "812 B", "3.41 MB", "1.20 GB".
export function bytes(n) {
  if (n == null || Number.isNaN(n)) return "-";
  const units = ["B", "KB", "MB", "GB", "TB", "PB"];
  let i = 0;
  while (Math.abs(n) >= 1000 && i < units.length - 1) { n /= 1000; i += 1; }
  return `${i === 0 ? Math.round(n) : n.toPrecision(3)} ${units[i]}`;
}

export const when = (iso) => (iso ? new Date(iso).toLocaleString() : "-");

// "42 s ago", "5 min ago", "3 h ago", "2 d ago".
export function ago(iso) {
  if (!iso) return "never";
  const s = Math.max(0, (Date.now() - new Date(iso).getTime()) / 1000);
  if (s < 90) return `${Math.round(s)} s ago`;
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 129600) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

export const seconds = (s) => (s == null ? "-" : `${s < 10 ? s.toFixed(1) : Math.round(s)} s`);
