// The part of Pi's extension API (@mariozechner/pi-coding-agent's
// ExtensionAPI, 0.73) this extension uses, declared here so that neither
// its build nor its tests need Pi itself: Pi's own objects satisfy these
// shapes structurally.
import type { TSchema } from "typebox";

export interface ToolText {
  type: "text";
  text: string;
}

export interface ToolResult<D = unknown> {
  content: ToolText[];
  details: D;
}

export interface PiUI {
  select(title: string, options: string[], opts?: { signal?: AbortSignal }): Promise<string | undefined>;
  notify(message: string, type?: "info" | "warning" | "error"): void;
}

export interface PiContext {
  hasUI: boolean;
  cwd: string;
  ui: PiUI;
  signal?: AbortSignal;
}

export interface PiTool<P> {
  name: string;
  label: string;
  description: string;
  promptSnippet?: string;
  promptGuidelines?: string[];
  parameters: TSchema;
  execute(
    toolCallId: string,
    params: P,
    signal: AbortSignal | undefined,
    onUpdate: ((partial: ToolResult) => void) | undefined,
    ctx: PiContext,
  ): Promise<ToolResult>;
}

export interface PiAPI {
  registerTool<P>(tool: PiTool<P>): void;
  registerCommand(name: string, options: { description?: string; handler: (args: string, ctx: PiContext) => Promise<void> }): void;
  registerFlag(name: string, options: { description?: string; type: "boolean" | "string"; default?: boolean | string }): void;
  getFlag(name: string): boolean | string | undefined;
}
