// Conversations as seed 001's routes answer them.

export interface Summary {
  id: string;
  title: string;
  tags: string[];
  sessionId: string | null;
  messageCount: number;
  firstMessage: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface Message {
  id: string;
  role: string;
  content: string;
  messageType: string;
  pinned: boolean;
  metadata: Record<string, unknown>;
  createdAt: string;
}

export interface Conversation extends Summary {
  documentContext: Record<string, unknown> | null;
  embeddingProvider: string | null;
  messages: Message[];
  nextCursor: string | null;
}

export interface SearchResult {
  conversationId: string;
  title: string;
  snippet: string;
  messageId: string | null;
  createdAt: string;
}

export const HITL_TYPES = new Set(["hitl_prompt", "hitl_feedback"]);

export function parseTags(text: string): string[] {
  return [...new Set(text.split(",").map((tag) => tag.trim()).filter(Boolean))];
}

export function when(iso: string): string {
  return new Date(iso).toLocaleString();
}
