// A form generated from a checkpoint's proposed values: text, number or checkbox by the value's type.
import type { Scalar } from "./model";

export function DataForm({ values, onChange }: { values: Record<string, Scalar>; onChange: (values: Record<string, Scalar>) => void }) {
  const names = Object.keys(values);
  if (!names.length) return null;
  return (
    <fieldset className="data-form">
      <legend>Proposed values</legend>
      {names.map((name) => {
        const value = values[name];
        const id = `field-${name}`;
        if (typeof value === "boolean") {
          return (
            <div key={name} className="field">
              <input id={id} type="checkbox" checked={value} onChange={(e) => onChange({ ...values, [name]: e.target.checked })} />
              <label htmlFor={id}>{name}</label>
            </div>
          );
        }
        return (
          <div key={name} className="field">
            <label htmlFor={id}>{name}</label>
            <input id={id} type={typeof value === "number" ? "number" : "text"} value={value === null ? "" : String(value)}
              onChange={(e) => onChange({ ...values, [name]: typeof value === "number" ? Number(e.target.value) : e.target.value })} />
          </div>
        );
      })}
    </fieldset>
  );
}
