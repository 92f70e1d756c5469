"""Looking at tables: the self-contained HTML view (``hw-profile show``) and one table against another at its own
points (``hw-profile compare``)."""
