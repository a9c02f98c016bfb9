"""Dense search, beside the lexical backends: the embedder that is chosen
(choice), what it reads of a chunk (views), embedding and the vectors kept in
step with the database (embedding), the ANN index files (vectors), the SQL
over stored vectors (stored), and how a search reports its dense side (status)."""
