// An aggregate's chain verification as audit.verify answers it, a span of at most 1,000
// events at a time: the spans checked so far folded into one status, and that status in words.

export interface ChainBreak {
  version: number;
  reason: string;
}

export interface ChainSpan {
  aggregateId: string;
  eventsChecked: number;
  intact: boolean;
  breaks: ChainBreak[];
  throughVersion: number | null;
  nextAfterVersion: number | null;
}

export interface ChainStatus {
  eventsChecked: number;
  breaks: ChainBreak[];
  throughVersion: number | null;
  nextAfterVersion: number | null; // more events follow: the next span starts after this version
}

export function withSpan(status: ChainStatus | undefined, span: ChainSpan): ChainStatus {
  return {
    eventsChecked: (status?.eventsChecked ?? 0) + span.eventsChecked,
    breaks: [...(status?.breaks ?? []), ...span.breaks],
    throughVersion: span.throughVersion ?? status?.throughVersion ?? null,
    nextAfterVersion: span.nextAfterVersion,
  };
}

function counted(events: number): string {
  return `${events} ${events === 1 ? "event" : "events"} checked`;
}

export function chainSummary(status: ChainStatus): string {
  const [first, ...rest] = status.breaks;
  if (first) {
    const others = rest.length ? `; ${rest.length} more ${rest.length === 1 ? "break" : "breaks"}` : "";
    return `broken at version ${first.version} (${first.reason}${others}), ${counted(status.eventsChecked)}`;
  }
  if (status.nextAfterVersion !== null) {
    return `holds through version ${status.throughVersion}, ${counted(status.eventsChecked)}; later events not checked yet`;
  }
  return `holds, ${counted(status.eventsChecked)}`;
}
