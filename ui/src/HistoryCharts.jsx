import { Box, Button, Card, Heading, HStack, NativeSelect, SimpleGrid, Text } from "@chakra-ui/react";
import {
  BarElement, Chart as ChartJS, Filler, Legend, LinearScale, LineElement, PointElement, Tooltip,
} from "chart.js";
import zoomPlugin from "chartjs-plugin-zoom";
import { useEffect, useRef, useState } from "react";
import { Bar, Line } from "react-chartjs-2";
import { bytes, seconds, when } from "./format.js";

ChartJS.register(LinearScale, PointElement, LineElement, BarElement, Tooltip, Legend, Filler, zoomPlugin);

export const RANGES = [["1", "last day"], ["7", "last 7 days"], ["30", "last 30 days"], ["90", "last 90 days"], ["0", "all runs"]];

// The UI's colors, read from Chakra's CSS variables, read again when the user switches dark mode.
function useThemeColors() {
  const read = () => {
    const style = getComputedStyle(document.documentElement);
    const token = (name, fallback) => style.getPropertyValue(`--chakra-colors-${name}`).trim() || fallback;
    return {
      fg: token("fg", "#333"), muted: token("fg-muted", "#777"), border: token("border", "#ddd"),
      before: token("orange-500", "#dd6b20"), after: token("blue-500", "#3182ce"), paused: token("red-500", "#e53e3e"),
    };
  };
  const [colors, setColors] = useState(read);
  useEffect(() => {
    const observer = new MutationObserver(() => setColors(read()));
    observer.observe(document.documentElement, { attributes: true, attributeFilter: ["class", "style", "data-theme"] });
    return () => observer.disconnect();
  }, []);
  return colors;
}

const CHARTS = [
  { key: "files", title: "Data files per run", before: (r) => r.data_files_before, after: (r) => r.data_files_after, format: (v) => v.toLocaleString() },
  { key: "delete_files", title: "Delete files per run", before: (r) => r.delete_files_before, after: (r) => r.delete_files_after, format: (v) => v.toLocaleString() },
  {
    key: "file_size", title: "Average data file size",
    before: (r) => (r.data_files_before ? r.bytes_before / r.data_files_before : null),
    after: (r) => (r.data_files_after ? r.bytes_after / r.data_files_after : null), format: bytes,
  },
  { key: "paused", title: "Seconds writers were paused", paused: (r) => r.gate_closed_seconds, format: seconds },
];

// A tick of the time axis, as precise as the span shown needs: seconds within an hour, days beyond two.
function timeTick(value) {
  const span = this.max - this.min;
  const precision = span < 3600e3 ? { hour: "2-digit", minute: "2-digit", second: "2-digit" }
    : span < 2 * 86400e3 ? { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" }
    : { month: "short", day: "numeric" };
  return new Date(value).toLocaleString(undefined, precision);
}

function options(colors, format, runs) {
  const axis = { grid: { color: colors.border }, ticks: { color: colors.muted } };
  return {
    responsive: true, maintainAspectRatio: false, animation: false, parsing: false,
    interaction: { mode: "nearest", axis: "x", intersect: false },
    plugins: {
      legend: { labels: { color: colors.fg } },
      tooltip: {
        callbacks: {
          title: (items) => (items.length ? when(new Date(items[0].parsed.x).toISOString()) : ""),
          label: (item) => `${item.dataset.label}: ${format(item.parsed.y)}`,
          footer: (items) => {
            const run = items.length ? runs[items[0].raw.run] : undefined;
            return run ? `${run.run_id} · ${run.decision} · ${run.outcome}` : "";
          },
        },
      },
      zoom: { zoom: { drag: { enabled: true }, wheel: { enabled: true, modifierKey: "ctrl" }, mode: "x" }, pan: { enabled: true, mode: "x", modifierKey: "shift" } },
    },
    scales: {
      x: { ...axis, type: "linear", ticks: { ...axis.ticks, maxTicksLimit: 6, callback: timeTick } },
      y: { ...axis, beginAtZero: true, ticks: { ...axis.ticks, callback: (v) => format(v) } },
    },
  };
}

function HistoryChart({ chart, runs, colors, charts }) {
  const ref = useRef(null);
  useEffect(() => { charts.current[chart.key] = ref; }, [chart.key, charts]);
  const points = (value) => runs.map((r, i) => ({ x: Date.parse(r.started_at), y: value(r), run: i })).filter((p) => p.y != null);
  const shared = { parsing: false, pointRadius: 3, borderWidth: 2, spanGaps: true };
  const data = chart.paused
    ? { datasets: [{ label: "paused", data: points(chart.paused), backgroundColor: colors.paused, barThickness: 6 }] }
    : {
        datasets: [
          { ...shared, label: "before", data: points(chart.before), borderColor: colors.before, backgroundColor: colors.before },
          { ...shared, label: "after", data: points(chart.after), borderColor: colors.after, backgroundColor: colors.after },
        ],
      };
  const Kind = chart.paused ? Bar : Line;
  return (
    <Card.Root size="sm" variant="outline">
      <Card.Header><Heading size="sm">{chart.title}</Heading></Card.Header>
      <Card.Body>
        <Box h="220px" onDoubleClick={() => ref.current?.resetZoom()}>
          <Kind ref={ref} data={data} options={options(colors, chart.format, runs)} data-chart={chart.key} />
        </Box>
      </Card.Body>
    </Card.Root>
  );
}

// Files, delete files, average file size and seconds paused, one point per run of the chosen time range.
export function HistoryCharts({ runs, days, setDays }) {
  const colors = useThemeColors();
  const charts = useRef({});
  const ordered = [...runs].sort((a, b) => Date.parse(a.started_at) - Date.parse(b.started_at));
  return (
    <Box id="history">
      <HStack gap={3} mb={3}>
        <NativeSelect.Root size="sm" width="180px">
          <NativeSelect.Field name="days" aria-label="Time range" value={days} onChange={(e) => setDays(e.target.value)}>
            {RANGES.map(([value, label]) => <option key={value} value={value}>{label}</option>)}
          </NativeSelect.Field>
          <NativeSelect.Indicator />
        </NativeSelect.Root>
        <Button size="xs" variant="outline" onClick={() => Object.values(charts.current).forEach((r) => r.current?.resetZoom())}>Reset zoom</Button>
        <Text fontSize="xs" color="fg.muted">Drag across a chart to zoom in; shift-drag to pan; double-click to reset.</Text>
      </HStack>
      {ordered.length ? (
        <SimpleGrid columns={{ base: 1, lg: 2 }} gap={3}>
          {CHARTS.map((chart) => <HistoryChart key={chart.key} chart={chart} runs={ordered} colors={colors} charts={charts} />)}
        </SimpleGrid>
      ) : <Text color="fg.muted">No run in this time range.</Text>}
    </Box>
  );
}
