// Container events from every agent over core NATS (live only: the manager
// reconciles with each agent's container list when it first sees the agent).

import type { NatsConnection } from "nats";
import type { Logger } from "pino";
import { type ContainerEventMessage, subjects } from "../../shared/subjects.ts";
import type { ContainerEventSource } from "./types.ts";

export function natsContainerEvents(nc: NatsConnection, log: Logger): ContainerEventSource {
  return {
    subscribe(handler) {
      const sub = nc.subscribe(subjects.allContainerEvents);
      void (async () => {
        for await (const m of sub) {
          let event: ContainerEventMessage;
          try {
            event = JSON.parse(new TextDecoder().decode(m.data)) as ContainerEventMessage;
            if (typeof event?.containerId !== "string" || typeof event.agentId !== "string")
              throw new Error("no containerId or agentId");
          } catch (err) {
            log.warn({ err, subject: m.subject }, "ignoring a bad container event");
            continue;
          }
          handler({ ...event, labels: event.labels ?? {} });
        }
      })();
      return () => sub.unsubscribe();
    },
  };
}
