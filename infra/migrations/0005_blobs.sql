-- Preview bytes (adapters/blobs.py), addressed by the sha256 of their plaintext and kept
-- per owner in chunks of 512 KiB, each sealed with the owner's data key: an erasure makes
-- them unreadable like the owner's events. Events hold only the sha256 and size. Not
-- events: rows may be deleted (an erased user's are).
CREATE TABLE chronicle.blob_chunks (
    owner text NOT NULL,
    sha256 text NOT NULL,
    seq integer NOT NULL,
    data bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, sha256, seq)
);
