"""How a job's data is stored and shown: the envelope, the argument serializer, model arguments, what
a payload may name (the registry), and the rules for Sensitive values and printable text."""
