import {
  Alert, Badge, Box, Button, Card, Flex, Heading, HStack, Input, Link, NativeSelect, SimpleGrid, Spinner, Stat,
  Table, Text,
} from "@chakra-ui/react";
import { useEffect, useState } from "react";
import { Link as RouterLink } from "react-router-dom";
import { apiUrl, useJson } from "./api.js";
import { ago, count } from "./format.js";

export const NEED = {
  needs_work: { label: "needs work", palette: "orange" },
  check_failed: { label: "check failed", palette: "red" },
  unknown: { label: "unknown", palette: "gray" },
  healthy: { label: "healthy", palette: "green" },
};
export const OUTCOME_PALETTE = { failed: "red", running: "blue", success: "green", skipped: "gray", dry_run: "purple" };

const FILTERS = [
  ["gate", "Gate", [["", "any gate"], ["closed", "closed"], ["open", "open"]]],
  ["need", "Need", [["", "any need"], ...Object.entries(NEED).map(([value, { label }]) => [value, label])]],
  ["outcome", "Last run", [["", "any outcome"], ...["failed", "running", "success", "skipped", "dry_run", "none"].map((o) => [o, o])]],
  ["sort", "Order", [["need", "by need"], ["table", "by name"], ["gate", "closed gates first"], ["last_run", "newest run first"]]],
];

function Summary({ summary }) {
  const figures = [
    ["gates_closed", "Gates closed now", summary.gates_closed, summary.gates_closed ? "red" : undefined],
    ["needing_work", "Tables needing work", summary.needing_work, summary.needing_work ? "orange" : undefined],
    ["runs_failed_24h", "Runs failed, last 24 h", summary.runs_failed_24h, summary.runs_failed_24h ? "red" : undefined],
    ["check_failed", "Checks failed", summary.check_failed, summary.check_failed ? "red" : undefined],
    ["tables", "Tables", summary.tables],
  ];
  return (
    <SimpleGrid columns={{ base: 2, md: 5 }} gap={3} id="summary">
      {figures.map(([key, label, value, palette]) => (
        <Card.Root key={key} size="sm" variant="outline">
          <Card.Body>
            <Stat.Root>
              <Stat.Label>{label}</Stat.Label>
              <Stat.ValueText data-summary={key} color={palette ? `${palette}.fg` : undefined}>{value.toLocaleString()}</Stat.ValueText>
            </Stat.Root>
          </Card.Body>
        </Card.Root>
      ))}
    </SimpleGrid>
  );
}

function Row({ row }) {
  const need = NEED[row.need];
  return (
    <Table.Row data-table={row.table} data-need={row.need} data-gate={row.gate}>
      <Table.Cell>
        <Link asChild colorPalette="blue" fontWeight="medium"><RouterLink to={`?table=${encodeURIComponent(row.table)}`}>{row.table}</RouterLink></Link>
      </Table.Cell>
      <Table.Cell>
        {row.gate === "closed" ? (
          <Badge colorPalette="red" title={`held by ${row.owner.dag_id} / ${row.owner.run_id}`}>
            closed {ago(row.closed_at)}
          </Badge>
        ) : <Badge colorPalette="gray" variant="outline">open</Badge>}
      </Table.Cell>
      <Table.Cell>
        <Badge colorPalette={need.palette} title={row.check ? row.check.reason : "no health check of this table"}>
          {need.label}
        </Badge>
        {row.need === "needs_work" && row.score ? <Text as="span" ms={2} fontSize="xs" color="fg.muted">score {row.score}</Text> : null}
      </Table.Cell>
      <Table.Cell textAlign="end">{row.data_files == null ? "-" : row.data_files.toLocaleString()}</Table.Cell>
      <Table.Cell textAlign="end">{row.delete_files == null ? "-" : row.delete_files.toLocaleString()}</Table.Cell>
      <Table.Cell title={row.check ? row.check.reason : ""}>{row.check ? ago(row.check.checked_at) : "not watched"}</Table.Cell>
      <Table.Cell>
        {row.last_run ? (
          <HStack gap={2}>
            <Badge colorPalette={OUTCOME_PALETTE[row.last_run.outcome] ?? "gray"}>{row.last_run.outcome}</Badge>
            <Link href={row.last_run.url} fontSize="sm" title={row.last_run.run_id}>{ago(row.last_run.started_at)}</Link>
          </HStack>
        ) : <Text color="fg.muted">none</Text>}
      </Table.Cell>
      <Table.Cell textAlign="end" color={row.failed_runs_24h ? "red.fg" : undefined}>{row.failed_runs_24h}</Table.Cell>
    </Table.Row>
  );
}

export function AllTables({ params, setParams }) {
  const query = Object.fromEntries(["q", "gate", "need", "outcome", "sort", "page"].map((k) => [k, params.get(k) ?? ""]));
  const { data, error, loading } = useJson(apiUrl("tables", { ...query, page_size: 50 }));
  const [q, setQ] = useState(query.q);
  useEffect(() => setQ(query.q), [query.q]);
  const set = (changes) => {
    const next = new URLSearchParams(params);
    for (const [key, value] of Object.entries(changes)) (value ? next.set(key, value) : next.delete(key));
    if (!("page" in changes)) next.delete("page");
    setParams(next);
  };

  return (
    <Box p={4}>
      <Flex align="center" gap={3} mb={4}>
        <Heading size="xl">Iceberg tables</Heading>
        {loading ? <Spinner size="sm" /> : null}
      </Flex>
      {error ? (
        <Alert.Root status="error" mb={4}><Alert.Indicator /><Alert.Title>{error.message}</Alert.Title></Alert.Root>
      ) : null}
      {data ? <Summary summary={data.summary} /> : null}
      <Flex as="form" gap={3} my={4} wrap="wrap" align="end" onSubmit={(e) => { e.preventDefault(); set({ q }); }}>
        <Input name="q" size="sm" maxW="260px" placeholder="filter by table name" value={q} onChange={(e) => setQ(e.target.value)} />
        {FILTERS.map(([key, label, options]) => (
          <NativeSelect.Root key={key} size="sm" width="190px" title={label}>
            <NativeSelect.Field name={key} aria-label={label} value={query[key] || (key === "sort" ? "need" : "")}
              onChange={(e) => set({ [key]: e.target.value })}>
              {options.map(([value, text]) => <option key={value} value={value}>{text}</option>)}
            </NativeSelect.Field>
            <NativeSelect.Indicator />
          </NativeSelect.Root>
        ))}
        <Button type="submit" size="sm" variant="outline">Filter</Button>
      </Flex>
      {data ? (
        <>
          <Table.Root size="sm" interactive id="tables">
            <Table.Header>
              <Table.Row>
                {["Table", "Gate", "Need", "Data files", "Delete files", "Last check", "Last run", "Failed, 24 h"].map((h) => (
                  <Table.ColumnHeader key={h} textAlign={["Data files", "Delete files", "Failed, 24 h"].includes(h) ? "end" : undefined}>{h}</Table.ColumnHeader>
                ))}
              </Table.Row>
            </Table.Header>
            <Table.Body>{data.rows.map((row) => <Row key={row.table} row={row} />)}</Table.Body>
          </Table.Root>
          <HStack mt={3} gap={3} id="pages">
            <Button size="xs" variant="outline" disabled={data.page <= 1} onClick={() => set({ page: String(data.page - 1) })}>Previous</Button>
            <Text fontSize="sm" data-page={data.page}>
              Page {data.page} of {data.pages} · {data.matching.toLocaleString()} of {count(data.summary.tables, "table")}
            </Text>
            <Button size="xs" variant="outline" disabled={data.page >= data.pages} onClick={() => set({ page: String(data.page + 1) })}>Next</Button>
          </HStack>
        </>
      ) : null}
    </Box>
  );
}
