/** Common name of the client certificate coordinators use to call agents; agents accept only it over TCP. */
export const COORDINATOR_CLIENT_NAME = "berth-coordinator";
