"""The durable trajectory store: records, ORM models, the batching writer, migrations, export."""
