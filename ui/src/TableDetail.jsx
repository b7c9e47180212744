import {
  Alert, Badge, Box, Button, Card, Code, Field, Flex, Heading, HStack, Input, Link, SimpleGrid, Spinner, Stat, Table,
  Text,
} from "@chakra-ui/react";
import { useState } from "react";
import { Link as RouterLink, useSearchParams } from "react-router-dom";
import { apiUrl, postForm, useJson } from "./api.js";
import { NEED, OUTCOME_PALETTE } from "./AllTables.jsx";
import { ago, bytes, count, seconds, when } from "./format.js";
import { HistoryCharts } from "./HistoryCharts.jsx";

const path = (table) => `tables/${encodeURIComponent(table)}`;

function ForceOpen({ table, token, done }) {
  const [reason, setReason] = useState("");
  const [state, setState] = useState({ busy: false, error: undefined });
  const submit = (event) => {
    event.preventDefault();
    setState({ busy: true, error: undefined });
    postForm(apiUrl(`${path(table)}/force-open`), { reason, form_token: token })
      .then(() => { setState({ busy: false }); setReason(""); done(); })
      .catch((error) => setState({ busy: false, error }));
  };
  return (
    <Box as="form" id="force-open" onSubmit={submit} mt={3}>
      <HStack align="end" gap={3}>
        <Field.Root required maxW="480px">
          <Field.Label>Reason (recorded in the audit trail)</Field.Label>
          <Input name="reason" size="sm" value={reason} onChange={(e) => setReason(e.target.value)} placeholder="why writers must resume now" />
        </Field.Root>
        <Button type="submit" size="sm" colorPalette="red" loading={state.busy} disabled={!reason.trim()}>Force open</Button>
      </HStack>
      {state.error ? <Text color="red.fg" mt={2} id="force-open-error">{state.error.message}</Text> : null}
    </Box>
  );
}

function Gate({ table, gate, mayForceOpen, token, done }) {
  return (
    <Card.Root variant="outline" size="sm">
      <Card.Header><Heading size="md">Write gate</Heading></Card.Header>
      <Card.Body>
        <Text id="gate" data-gate={gate.state}>
          <Badge colorPalette={gate.state === "closed" ? "red" : "gray"} me={2}>{gate.state}</Badge>
          {gate.line}
          {gate.owner ? <> (<Link href={gate.owner.url} colorPalette="blue">the run that holds it</Link>)</> : null}
        </Text>
        {gate.writers.length ? (
          <Table.Root size="sm" mt={3} id="writers">
            <Table.Header><Table.Row>{["Writer", "Commits", "Last seen", "This closing", "Acknowledged", "Its snapshot"].map((h) => <Table.ColumnHeader key={h}>{h}</Table.ColumnHeader>)}</Table.Row></Table.Header>
            <Table.Body>
              {gate.writers.map((w) => (
                <Table.Row key={w.writer_id} data-writer={w.writer_id}>
                  <Table.Cell>{w.writer_id}</Table.Cell>
                  <Table.Cell className="commits" title={w.observed_detail ?? ""}>
                    {w.commit_kind ?? "nothing declared"}{w.iceberg_version ? `, Iceberg ${w.iceberg_version}` : ""}
                    {w.observed_kind ? <Badge colorPalette="red" ms={2}>seen: {w.observed_kind} (snapshot {w.observed_snapshot_id})</Badge> : null}
                  </Table.Cell>
                  <Table.Cell>{ago(w.seen_at)}</Table.Cell>
                  <Table.Cell className="closing" title={w.pause_reason ?? ""}>
                    {gate.state === "closed" ? (w.paused ? "paused" : "keeps committing") : "-"}
                  </Table.Cell>
                  <Table.Cell>{w.ack_at ? ago(w.ack_at) : "-"}</Table.Cell><Table.Cell>{w.ack_snapshot_id ?? "-"}</Table.Cell>
                </Table.Row>
              ))}
            </Table.Body>
          </Table.Root>
        ) : null}
        {gate.writers.filter((w) => w.observed_detail).map((w) => (
          <Text key={`seen-${w.writer_id}`} className="observed" mt={2} fontSize="sm" color="red.600">
            {w.writer_id} declared {w.commit_kind}, but {w.observed_detail}: it is taken as {w.observed_kind}.
          </Text>
        ))}
        {mayForceOpen ? <ForceOpen table={table} token={token} done={done} /> : null}
      </Card.Body>
    </Card.Root>
  );
}

function Health({ health, check, errors }) {
  const figures = health ? [
    ["Data files", count(health.data_files, "data file")], ["Small files", count(health.small_files, "small file")],
    ["Delete files", count(health.delete_files, "delete file")],
    ["Average file size", bytes(health.data_files ? health.data_bytes / health.data_files : null)],
  ] : [];
  return (
    <Card.Root variant="outline" size="sm">
      <Card.Header><Heading size="md">Health now</Heading></Card.Header>
      <Card.Body>
        <SimpleGrid columns={{ base: 2, md: 4 }} gap={3} id="health">
          {figures.map(([label, value]) => (
            <Stat.Root key={label}><Stat.Label>{label}</Stat.Label><Stat.ValueText fontSize="lg">{value}</Stat.ValueText></Stat.Root>
          ))}
        </SimpleGrid>
        <Text mt={3} id="check" fontSize="sm">
          {check ? <>Health watch, {ago(check.checked_at)} (read its {check.reading}): <b>{check.decision}</b>. {check.reason}</>
            : "No health check: the health watch is off for this table, or has not swept yet."}
        </Text>
        {errors.map((e) => <Text key={e} className="error" color="red.fg" fontSize="sm">{e}</Text>)}
      </Card.Body>
    </Card.Root>
  );
}

const files = (before, after) => `${before ?? "-"} → ${after ?? "-"}`;

export function TableDetail({ table }) {
  const [params, setParams] = useSearchParams();
  const days = params.get("days") ?? "30";
  const [reload, setReload] = useState(0);
  const { data, error, loading } = useJson(apiUrl(path(table), { days }), reload);
  const setDays = (value) => { const next = new URLSearchParams(params); next.set("days", value); setParams(next); };

  return (
    <Box p={4}>
      <Text fontSize="sm" mb={2}><Link asChild colorPalette="blue"><RouterLink to="?">Iceberg tables</RouterLink></Link></Text>
      <Flex align="center" gap={3} mb={4}>
        <Heading size="xl">{table}</Heading>
        {data ? <Link href={`dags/${encodeURIComponent(data.dag_id)}`} fontSize="sm" colorPalette="blue">its compaction DAG</Link> : null}
        {loading ? <Spinner size="sm" /> : null}
      </Flex>
      {error ? <Alert.Root status="error" mb={4}><Alert.Indicator /><Alert.Title>{error.message}</Alert.Title></Alert.Root> : null}
      {data ? (
        <Flex direction="column" gap={4}>
          <SimpleGrid columns={{ base: 1, xl: 2 }} gap={4}>
            <Gate table={table} gate={data.gate} mayForceOpen={data.may_force_open} token={data.form_token} done={() => setReload((n) => n + 1)} />
            <Health health={data.health} check={data.check} errors={data.errors} />
          </SimpleGrid>
          <Heading size="md">History</Heading>
          <HistoryCharts runs={data.runs} days={days} setDays={setDays} />
          <Table.Root size="sm" id="runs">
            <Table.Header><Table.Row>{["Started", "Run", "Decision", "Outcome", "Data files", "Delete files", "Paused", "Reason"].map((h) => <Table.ColumnHeader key={h}>{h}</Table.ColumnHeader>)}</Table.Row></Table.Header>
            <Table.Body>
              {[...data.runs].reverse().map((r) => (
                <Table.Row key={r.run_id} data-run-id={r.run_id} data-outcome={r.outcome}>
                  <Table.Cell title={r.started_at}>{when(r.started_at)}</Table.Cell>
                  <Table.Cell><Link href={r.url} colorPalette="blue">{r.run_id}</Link></Table.Cell>
                  <Table.Cell>{r.decision}</Table.Cell>
                  <Table.Cell><Badge colorPalette={OUTCOME_PALETTE[r.outcome] ?? "gray"}>{r.outcome}</Badge></Table.Cell>
                  <Table.Cell>{files(r.data_files_before, r.data_files_after)}</Table.Cell>
                  <Table.Cell>{files(r.delete_files_before, r.delete_files_after)}</Table.Cell>
                  <Table.Cell>{seconds(r.gate_closed_seconds)}</Table.Cell>
                  <Table.Cell maxW="420px">
                    {r.reason}
                    {r.detail ? <Text className="run-detail" color="fg.error" mt={1}>{r.detail}</Text> : null}
                  </Table.Cell>
                </Table.Row>
              ))}
            </Table.Body>
          </Table.Root>
          <Heading size="md">Audit trail</Heading>
          <Table.Root size="sm" id="audit">
            <Table.Header><Table.Row>{["At", "Action", "Run", "Detail"].map((h) => <Table.ColumnHeader key={h}>{h}</Table.ColumnHeader>)}</Table.Row></Table.Header>
            <Table.Body>
              {data.audit.map((a, i) => (
                <Table.Row key={i} data-action={a.action}>
                  <Table.Cell>{when(a.at)}</Table.Cell><Table.Cell><Code>{a.action}</Code></Table.Cell>
                  <Table.Cell>{a.owner_run_id ?? "-"}</Table.Cell><Table.Cell>{a.detail ?? ""}</Table.Cell>
                </Table.Row>
              ))}
            </Table.Body>
          </Table.Root>
        </Flex>
      ) : null}
    </Box>
  );
}
