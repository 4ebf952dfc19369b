//! The PostgreSQL scope against a real server.
