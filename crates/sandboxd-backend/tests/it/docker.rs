//! Docker backend tests (a real Docker engine, locally built images).
