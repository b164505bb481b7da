"""Users as data subjects: erasure by crypto-shredding."""
