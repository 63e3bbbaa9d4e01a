DROP TABLE seqbus_journal;
