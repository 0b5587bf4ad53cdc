// The contract's suite against the shared fake (test/helpers/fake-container-api.ts)
// in its scripted mode: the fake the coordinator's logic tests use behaves as
// an agent does.

import { FakeContainerApi } from "../helpers/fake-container-api.ts";
import { containerApiConformance } from "./container-api.ts";

const image = "registry.test/berth/python:bookworm";

containerApiConformance("ContainerApi conformance: the shared fake", async () => {
  const api = new FakeContainerApi({ scripted: true });
  api.images = [
    {
      ref: image,
      refs: [image],
      digest: "sha256:c0ffee",
      sizeBytes: 1,
      pulledAt: "2024-05-01T00:00:00.000Z",
      inUse: false,
    },
  ];
  return { api, image };
});
